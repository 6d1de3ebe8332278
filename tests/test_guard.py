"""Guard mode: outputs and workspaces fenced by guard bytes, checked after every call."""
import numpy as np
import pytest

import fusegen as fg

from _optional import needs_gxx

pytestmark = needs_gxx

HEADER = (fg.__path__[0] + "/emitters/templates/custom_aot_extra.h")

# Writes one float past its single output when `overrun` is set; otherwise a clean copy.
OVERRUN = r"""
#include <cstdint>
#include "custom_aot_extra.h"
struct Data : public AotKernelData { int64_t overrun = 0; };
extern "C" int OverrunInit(int *, int64_t **shapes, const char **, AotExtra *extra) {
  auto *d = new Data();
  d->overrun = extra->Attr<int64_t>("overrun");
  extra->SetKernelData(d);
  extra->SetWorkSpace({16});
  (void)shapes;
  return 0;
}
extern "C" int Overrun(int nparam, void **params, int *ndims, int64_t **shapes, const char **, void *,
                       void *extra) {
  (void)nparam;
  const auto *d = static_cast<Data *>(static_cast<AotExtra *>(extra)->KernelData());
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  unsigned char *ws = static_cast<unsigned char *>(params[2]);
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; ++i) n *= shapes[0][i];
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
  if (d->overrun == 1) y[n] = 1.0f;           // one element past the output
  if (d->overrun == 2) ws[16] = 7;            // one byte past the workspace
  if (d->overrun == 3) y[-1] = 1.0f;          // one element before the output
  return 0;
}
"""


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard")
    (d / "overrun.cc").write_text(OVERRUN)
    (d / "custom_aot_extra.h").write_text(open(HEADER).read())
    return str(d / "overrun.cc")


def test_clean_kernel_passes_in_guard_mode(source):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    k = fg.AotKernel(source + ":Overrun", attrs={"overrun": 0}, out_shape=lambda s: s, guard=True)
    np.testing.assert_array_equal(k(x), x)


@pytest.mark.parametrize("mode, where", [(1, "output 0: wrote 4 byte(s) past its end"),
                                         (2, "workspace 0: wrote 1 byte(s) past its end"),
                                         (3, "output 0: wrote 4 byte(s) before its start")])
def test_out_of_bounds_write_is_named(source, mode, where):
    x = np.ones((3, 4), np.float32)
    out = np.full((3, 4), -5.0, np.float32)
    k = fg.AotKernel(source + ":Overrun", attrs={"overrun": mode}, out_shape=lambda s: s, guard=True)
    with pytest.raises(fg.KernelError, match="Overrun") as e:
        k(x, out=out)
    assert where in str(e.value) and "guard mode" in str(e.value)
    # The caller's out= array is untouched when the call fails.
    assert (out == -5.0).all()


def test_guard_mode_from_environment(source, monkeypatch):
    monkeypatch.setenv("FUSEGEN_GUARD", "1")
    k = fg.AotKernel(source + ":Overrun", attrs={"overrun": 1}, out_shape=lambda s: s)
    assert k.guard
    with pytest.raises(fg.KernelError, match="out of bounds"):
        k(np.ones(5, np.float32))
