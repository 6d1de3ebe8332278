"""The Plan layer: the schedule every backend shares. Its face re-exports the public names of

* ``plan.stages``: ``build_plan``, ``Plan`` and ``Stage`` (stages, their reads and stores), and
  ``scan_form`` (the op the C++ emitters and their hosts run for an op with scans);
* ``plan.access``: ``Access`` and the index-map steps;
* ``plan.layout``: run-time layouts (``evaluate``, ``collapse``, ``schedule``);
* ``plan.exprs``: the op -> expression-text tables every renderer shares;
* ``plan.moments``: ``centered_pairs``, a mean and a variance centered on it, for one pass.
"""
from __future__ import annotations

from ..ir import computed_nodes, leaves_of, stable_key  # noqa: F401  (graph queries plans are built from)
from .access import BROADCAST, REDUCED, Access, Broadcast, Reduced, slot_name  # noqa: F401
from .layout import (  # noqa: F401
    STEP_RULES, GroupRun, Layout, access_layout, access_view, c_strides, collapse, evaluate, read_strides, schedule,
    strides_of,
    stage_domain, write_strides,
)
from .moments import CenteredPair, centered_pairs  # noqa: F401
from .stages import Plan, Stage, build_plan, read_leaves, scan_form  # noqa: F401
