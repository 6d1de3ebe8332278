// Test harness for fusegen/templates/_philox.inc.j2 (tests/test_philox.py renders the partial
// as philox.inc beside this file, builds it as a shared library and calls it through ctypes).
//
// Each fill_* writes elements [i0, i0 + n) of one kind the way a fused kernel should: the
// whole blocks in a loop of their own, one Philox call per block (four elements of a 32-bit
// kind, two of a float64 kind: the loops marked VEC must vectorize), and the partial blocks at
// either end element by element through the *_at functions. With per_element set, every
// element goes through *_at (its own Philox call).
#include <cmath>
#include <cstdint>

#include "philox.inc"

namespace {

// Calls one(k, i) for the elements outside whole blocks and whole(k, q, nb) for the nb whole
// blocks starting at block q, whose first element is out[k].
template <int PER, class One, class Whole>
void blocked(uint64_t i0, int64_t n, int per_element, One one, Whole whole) {
  int64_t k = 0;
  if (per_element) {
    for (; k < n; ++k) one(k, i0 + k);
    return;
  }
  for (; k < n && (i0 + k) % PER != 0; ++k) one(k, i0 + k);
  const int64_t nb = (n - k) / PER;
  whole(k, (i0 + k) / PER, nb);
  for (k += PER * nb; k < n; ++k) one(k, i0 + k);
}

constexpr uint64_t kRejected = ~uint64_t(0);

}  // namespace

extern "C" {

void kat(const uint32_t *ctr, const uint32_t *key, int64_t n, uint32_t *out) {
  for (int64_t j = 0; j < n; ++j) {
    const fg::Block b = fg::philox4x32_10(ctr[4 * j], ctr[4 * j + 1], ctr[4 * j + 2], ctr[4 * j + 3], key[2 * j],
                                          key[2 * j + 1]);
    for (int l = 0; l < 4; ++l) out[4 * j + l] = b.w[l];
  }
}

void fill_uniform_f32(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, float *out) {
  blocked<4>(i0, n, per_element, [&](int64_t k, uint64_t i) { out[k] = fg::uniform_f32_at(seed, offset, i); },
             [&](int64_t k, uint64_t q, int64_t nb) {
               float *__restrict o = out + k;
               for (int64_t b = 0; b < nb; ++b) {  // VEC uniform_f32
                 const fg::Block w = fg::philox_block(seed, offset, q + b);
                 for (int j = 0; j < 4; ++j) o[4 * b + j] = fg::uniform_f32(w.w[j]);
               }
             });
}

void fill_uniform_f64(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, double *out) {
  blocked<2>(i0, n, per_element, [&](int64_t k, uint64_t i) { out[k] = fg::uniform_f64_at(seed, offset, i); },
             [&](int64_t k, uint64_t q, int64_t nb) {
               double *__restrict o = out + k;
               for (int64_t b = 0; b < nb; ++b) {  // VEC uniform_f64
                 const fg::Block w = fg::philox_block(seed, offset, q + b);
                 o[2 * b] = fg::uniform_f64(w.w[0], w.w[1]);
                 o[2 * b + 1] = fg::uniform_f64(w.w[2], w.w[3]);
               }
             });
}

void fill_normal_f32(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, float *out) {
  blocked<4>(i0, n, per_element, [&](int64_t k, uint64_t i) { out[k] = fg::normal_f32_at(seed, offset, i); },
             [&](int64_t k, uint64_t q, int64_t nb) {
               float *__restrict o = out + k;
               for (int64_t b = 0; b < nb; ++b) {  // libm's log/cos/sin keep this loop scalar
                 const fg::Block w = fg::philox_block(seed, offset, q + b);
                 const fg::CosSin<float> z01 = fg::boxmuller_f32(w.w[0], w.w[1]);
                 const fg::CosSin<float> z23 = fg::boxmuller_f32(w.w[2], w.w[3]);
                 o[4 * b] = z01.c;
                 o[4 * b + 1] = z01.s;
                 o[4 * b + 2] = z23.c;
                 o[4 * b + 3] = z23.s;
               }
             });
}

void fill_normal_f64(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, double *out) {
  blocked<2>(i0, n, per_element, [&](int64_t k, uint64_t i) { out[k] = fg::normal_f64_at(seed, offset, i); },
             [&](int64_t k, uint64_t q, int64_t nb) {
               for (int64_t b = 0; b < nb; ++b) {
                 const fg::CosSin<double> z = fg::boxmuller_f64(fg::philox_block(seed, offset, q + b));
                 out[k + 2 * b] = z.c;
                 out[k + 2 * b + 1] = z.s;
               }
             });
}

// p is widened from float when float_p is set (a float attribute, as the AOT ABI carries it).
void fill_bernoulli(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, double p, int float_p,
                    uint8_t *out) {
  const int64_t t = fg::bernoulli_threshold(float_p ? double(float(p)) : p);
  blocked<4>(i0, n, per_element, [&](int64_t k, uint64_t i) { out[k] = fg::bernoulli_at(seed, offset, i, t); },
             [&](int64_t k, uint64_t q, int64_t nb) {
               uint8_t *__restrict o = out + k;
               for (int64_t b = 0; b < nb; ++b) {  // VEC bernoulli
                 const fg::Block w = fg::philox_block(seed, offset, q + b);
                 for (int j = 0; j < 4; ++j) o[4 * b + j] = fg::bernoulli(w.w[j], t);
               }
             });
}

// randint's values minus low. For n <= 2^32, a vectorized pass takes each element's first draw
// and marks rejected ones; a second pass redoes only those (rare for small n).
void fill_randint(uint64_t seed, uint64_t offset, uint64_t i0, int64_t n, int per_element, uint64_t range,
                  uint64_t *out) {
  const uint64_t t = fg::randint_threshold(range);
  auto one = [&](int64_t k, uint64_t i) { out[k] = fg::randint_offset_at(seed, offset, i, range, t); };
  if (range > (uint64_t(1) << 32)) {
    blocked<4>(i0, n, 1, one, [](int64_t, uint64_t, int64_t) {});
    return;
  }
  blocked<4>(i0, n, per_element, one, [&](int64_t k, uint64_t q, int64_t nb) {
    uint64_t *__restrict o = out + k;
    for (int64_t b = 0; b < nb; ++b) {  // VEC randint
      const fg::Block w = fg::philox_block(seed, offset, q + b);
      for (int j = 0; j < 4; ++j) {
        uint64_t c;
        o[4 * b + j] = fg::lemire32(w.w[j], range, t, &c) ? c : kRejected;
      }
    }
    for (int64_t e = 0; e < 4 * nb; ++e) {
      if (o[e] == kRejected) one(k + e, i0 + k + e);
    }
  });
}

void thresholds(const double *p, const float *pf, int64_t n, int64_t *t, int64_t *tf) {
  for (int64_t j = 0; j < n; ++j) {
    t[j] = fg::bernoulli_threshold(p[j]);
    tf[j] = fg::bernoulli_threshold(pf[j]);
  }
}

uint64_t randint_threshold(uint64_t range) { return fg::randint_threshold(range); }

}  // extern "C"
