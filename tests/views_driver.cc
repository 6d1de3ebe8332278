// Test driver of fusegen's C++ view evaluator (templates/_fg_views.inc.j2), loaded with ctypes by
// tests/test_views_cpp.py. "fg_views_under_test.h" is written by that test beside this file: the
// standard headers and the rendered _fg_runtime and _fg_views partials, as a kernel includes them.
//
// fgv_run evaluates view chains given as one flat int64 program and writes what it computed as
// one flat int64 list; tests/views_chains.py writes the programs and builds the same list from
// fusegen/views.py, so the test compares the two lists whole.
//
// Program: n_ops, then per operand: rank, dims (its contiguous shape), n_steps, then per step:
// kind, nargs, args; then the domain: rank, dims. Step kinds and their args:
//   1 broadcast: shape | 2 permute: perm | 3 index: (kind, start, step, length) per item
//   4 flip: axes | 5 place: axis, start, total | 6 reshape: shape
// Result: code, operand, step (code 0 and -1, -1 on success; the failing operand and step, -1 for
// its contiguous start, else operand -1 for refine). On success, each operand's view, the nest,
// and the boxes with their layouts (see put_view, put_nest, put_boxes). With `addr` given (n_ops
// times the domain's size, filled with -2 by the caller), each box with a layout writes every
// element's address per operand (-1 where inactive), walking the box the way a kernel does.
#include "fg_views_under_test.h"

namespace {

using fg::views::Box;
using fg::views::BoxIter;
using fg::views::BoxLayout;
using fg::views::Index;
using fg::views::Nest;
using fg::views::View;

constexpr int64_t kOverflow = -1000;   // the output list or the program is malformed
constexpr int64_t kTwice = -1001;      // two boxes wrote one element
constexpr int kMaxOps = 4;
constexpr int kMaxItems = 64;

struct Out {
  int64_t *p;
  int64_t cap, n = 0;
  bool overflow = false;

  void put(int64_t x) {
    if (n < cap) {
      p[n] = x;
    } else {
      overflow = true;
    }
    ++n;
  }
};

struct Program {
  const int64_t *p;
  int64_t n, at = 0;
  bool bad = false;

  int64_t take() {
    if (at >= n) {
      bad = true;
      return 0;
    }
    return p[at++];
  }
};

// A shape from the program; a rank beyond kMaxRank cannot be held in fg::Shape and is the error
// views._check_shape gives it first.
int take_shape(Program *prog, int64_t rank, fg::Shape *s) {
  if (rank > fg::kMaxRank) {
    for (int64_t k = 0; k < rank; ++k) prog->take();
    return fg::FG_ERR_VIEW_RANK;
  }
  s->rank = static_cast<int>(rank);
  for (int k = 0; k < s->rank; ++k) s->d[k] = prog->take();
  return fg::FG_OK;
}

int apply_step(Program *prog, View *v) {
  const int64_t kind = prog->take();
  const int64_t nargs = prog->take();
  if (nargs < 0 || nargs > 4 * kMaxItems) {
    prog->bad = true;
    return fg::FG_OK;
  }
  int64_t args[4 * kMaxItems];
  for (int64_t j = 0; j < nargs; ++j) args[j] = prog->take();
  const int n = static_cast<int>(nargs);
  fg::Shape s;
  switch (kind) {
    case 1:
    case 6: {
      Program sub{args, nargs};
      FG_TRY(take_shape(&sub, nargs, &s));
      return kind == 1 ? fg::views::broadcast(v, s) : fg::views::reshape(v, s);
    }
    case 2:
      return fg::views::permute(v, args, n);
    case 3: {
      Index items[kMaxItems];
      for (int j = 0; j < n / 4; ++j) {
        items[j].kind = static_cast<int>(args[4 * j]);
        items[j].start = args[4 * j + 1];
        items[j].step = args[4 * j + 2];
        items[j].length = args[4 * j + 3];
      }
      return fg::views::index(v, items, n / 4);
    }
    case 4:
      return fg::views::flip(v, args, n);
    case 5:
      if (n != 3) break;
      return fg::views::place(v, static_cast<int>(args[0]), args[1], args[2]);
    default:
      break;
  }
  prog->bad = true;
  return fg::FG_OK;
}

void put_inner(Out *o, bool modular, const fg::views::Inner &in) {
  if (!modular) return;
  o->put(in.ndig);
  for (int j = 0; j < in.ndig; ++j) {
    o->put(in.ext[j]);
    o->put(in.str[j]);
  }
  o->put(in.offset);
}

// rank; per dim: nsub, (extent, stride) per sub-dim, piece, lo, hi; offset, modular, [inner],
// active. Inner: ndig, (extent, stride) per digit, offset.
void put_view(Out *o, const View &v) {
  o->put(v.rank);
  for (int k = 0; k < v.rank; ++k) {
    const fg::views::Axis &a = v.dims[k];
    o->put(a.nsub);
    for (int j = 0; j < a.nsub; ++j) {
      o->put(a.ext[j]);
      o->put(a.str[j]);
    }
    o->put(a.piece);
    o->put(a.piece ? a.lo : 0);
    o->put(a.piece ? a.hi : 0);
  }
  o->put(v.offset);
  o->put(v.modular);
  put_inner(o, v.modular, v.inner);
  o->put(v.active);
}

// ndims, extents, origins; per operand: strides, offset, modular, [inner], (piece, lo, hi) per
// domain dim, active.
template <int NOPS>
void put_nest(Out *o, const Nest<NOPS> &nest) {
  o->put(nest.ndims);
  for (int j = 0; j < nest.ndims; ++j) o->put(nest.extent[j]);
  for (int j = 0; j < nest.ndims; ++j) o->put(nest.origin[j]);
  for (int i = 0; i < NOPS; ++i) {
    const fg::views::NestOperand &op = nest.op[i];
    for (int j = 0; j < nest.ndims; ++j) o->put(op.stride[j]);
    o->put(op.offset);
    o->put(op.modular);
    put_inner(o, op.modular, op.inner);
    for (int k = 0; k < nest.rank; ++k) {
      o->put(op.piece[k]);
      o->put(op.lo[k]);
      o->put(op.hi[k]);
    }
    o->put(op.active);
  }
}

// Walks one box's loop as a kernel would: refined coordinates over the layout's extents, each
// operand at offset + sum(coordinate * stride), unravelled by its Inner when modular.
template <int NOPS>
int64_t walk_box(const Nest<NOPS> &nest, const Box<NOPS> &box, const BoxLayout<NOPS> &L, int64_t *addr,
                 int64_t size) {
  int64_t count = 1;
  for (int j = 0; j < L.ndims; ++j) count *= L.extent[j];
  int64_t sub[fg::views::kMaxLoopDims];
  for (int64_t t = 0; t < count; ++t) {
    int64_t rest = t;
    for (int j = L.ndims - 1; j >= 0; --j) {
      sub[j] = rest % L.extent[j];
      rest /= L.extent[j];
    }
    int64_t coords[fg::kMaxRank] = {};
    for (int j = 0; j < L.ndims; ++j) {
      const int k = nest.origin[j];
      coords[k] = coords[k] * nest.extent[j] + sub[j];
    }
    int64_t flat = 0;
    for (int k = 0; k < nest.rank; ++k) flat = flat * nest.domain[k] + coords[k] + box.lo[k];
    for (int i = 0; i < NOPS; ++i) {
      const fg::views::NestOperand &op = nest.op[i];
      int64_t a = L.offset[i];
      for (int j = 0; j < L.ndims; ++j) a += sub[j] * op.stride[j];
      if (op.modular) a = op.inner.address(a);
      int64_t &slot = addr[i * size + flat];
      if (slot != -2) return kTwice;
      slot = box.active[i] ? a : -1;
    }
  }
  return 0;
}

// nboxes; per box: (lo, hi) per domain dim, active per operand, box_layout's code, and when 0
// the layout's extents and offsets.
template <int NOPS>
int64_t put_boxes(Out *o, const Nest<NOPS> &nest, int64_t *addr) {
  int64_t nboxes = 0;
  {
    BoxIter<NOPS> it(nest);
    Box<NOPS> box;
    while (it.next(&box)) ++nboxes;
  }
  o->put(nboxes);
  int64_t size = 1;
  for (int k = 0; k < nest.rank; ++k) size *= nest.domain[k];
  BoxIter<NOPS> it(nest);
  Box<NOPS> box;
  while (it.next(&box)) {
    for (int k = 0; k < box.rank; ++k) {
      o->put(box.lo[k]);
      o->put(box.hi[k]);
    }
    for (int i = 0; i < NOPS; ++i) o->put(box.active[i]);
    BoxLayout<NOPS> L;
    const int code = fg::views::box_layout(nest, box, &L);
    o->put(code);
    if (code != fg::FG_OK) continue;
    for (int j = 0; j < L.ndims; ++j) o->put(L.extent[j]);
    for (int i = 0; i < NOPS; ++i) o->put(L.offset[i]);
    if (addr != nullptr) {
      const int64_t status = walk_box(nest, box, L, addr, size);
      if (status != 0) return status;
    }
  }
  return 0;
}

template <int NOPS>
int64_t run(Program *prog, Out *o, int64_t *addr) {
  View views[NOPS];
  const View *ptrs[NOPS];
  int code = fg::FG_OK, bad_op = -1, bad_step = -1;
  for (int i = 0; i < NOPS; ++i) {
    ptrs[i] = &views[i];
    fg::Shape s;
    const int64_t rank = prog->take();
    int c = take_shape(prog, rank, &s);
    if (c == fg::FG_OK) c = fg::views::contiguous(s, &views[i]);
    if (c != fg::FG_OK && code == fg::FG_OK) {
      code = c;
      bad_op = i;
      bad_step = -1;
    }
    const int64_t nsteps = prog->take();
    for (int64_t j = 0; j < nsteps && !prog->bad; ++j) {
      if (code != fg::FG_OK) {  // skip the rest of the program after the first error
        prog->take();
        const int64_t nargs = prog->take();
        for (int64_t a = 0; a < nargs; ++a) prog->take();
        continue;
      }
      c = apply_step(prog, &views[i]);
      if (c != fg::FG_OK) {
        code = c;
        bad_op = i;
        bad_step = static_cast<int>(j);
      }
    }
  }
  fg::Shape domain;
  const int64_t drank = prog->take();
  int c = take_shape(prog, drank, &domain);
  if (prog->bad) return kOverflow;
  Nest<NOPS> nest;
  if (code == fg::FG_OK) {
    if (c == fg::FG_OK) c = fg::views::refine<NOPS>(ptrs, domain, &nest);
    if (c != fg::FG_OK) code = c;
  }
  o->put(code);
  o->put(code == fg::FG_OK ? -1 : bad_op);
  o->put(code == fg::FG_OK ? -1 : bad_step);
  if (code != fg::FG_OK) return 0;
  for (int i = 0; i < NOPS; ++i) put_view(o, views[i]);
  put_nest(o, nest);
  return put_boxes(o, nest, addr);
}

}  // namespace

extern "C" {

// kMaxRank, kMaxSubDims, kMaxLoopDims, the first view error code, the number of view error codes.
void fgv_limits(int64_t *out) {
  out[0] = fg::kMaxRank;
  out[1] = fg::views::kMaxSubDims;
  out[2] = fg::views::kMaxLoopDims;
  out[3] = fg::FG_ERR_VIEW_PARAM;
  out[4] = fg::FG_ERR_VIEW_INTERNAL - fg::FG_ERR_VIEW_PARAM + 1;
}

// The name of a view error code (nullptr for others): the enum's spelling, to compare with
// views.ERRORS.
const char *fgv_error_name(int64_t code) {
#define FGV_NAME(x) \
  case fg::x:       \
    return #x;
  switch (code) {
    FGV_NAME(FG_ERR_VIEW_PARAM)
    FGV_NAME(FG_ERR_VIEW_RANK)
    FGV_NAME(FG_ERR_VIEW_SUBDIMS)
    FGV_NAME(FG_ERR_VIEW_LOOP_DIMS)
    FGV_NAME(FG_ERR_VIEW_MODULAR)
    FGV_NAME(FG_ERR_VIEW_PIECE)
    FGV_NAME(FG_ERR_VIEW_NEST)
    FGV_NAME(FG_ERR_VIEW_BOX)
    FGV_NAME(FG_ERR_VIEW_INTERNAL)
    default:
      return nullptr;
  }
#undef FGV_NAME
}

// Runs one program (see the top of this file). Returns the result list's length, or kOverflow
// (the list did not fit in `cap`, or the program is malformed) or kTwice.
int64_t fgv_run(const int64_t *program, int64_t nprogram, int64_t *out, int64_t cap, int64_t *addr) {
  Program prog{program, nprogram};
  Out o{out, cap};
  const int64_t nops = prog.take();
  int64_t status = kOverflow;
  switch (nops) {
    case 1: status = run<1>(&prog, &o, addr); break;
    case 2: status = run<2>(&prog, &o, addr); break;
    case 3: status = run<3>(&prog, &o, addr); break;
    case 4: status = run<kMaxOps>(&prog, &o, addr); break;
    default: break;
  }
  if (status != 0) return status;
  return o.overflow || prog.bad ? kOverflow : o.n;
}

// Inner::address as a kernel calls it, for the hand-written modular cases.
int64_t fgv_inner_address(const int64_t *digits, int64_t ndig, int64_t offset, int64_t linear) {
  fg::views::Inner in;
  in.ndig = static_cast<int>(ndig);
  for (int j = 0; j < in.ndig; ++j) {
    in.ext[j] = digits[2 * j];
    in.str[j] = digits[2 * j + 1];
  }
  in.offset = offset;
  return in.address(linear);
}

}  // extern "C"
