// Sparse decode kernels: y = x W^T for a few tokens (1-16), reading only the weights that the
// non-zero entries of x need.
//
// Why: decoding one token through a large FFN reads every weight once and does one multiply-
// add per weight, so its time is the time to stream the weights from memory. An input entry
// that is zero for every token needs none of its column of W. With W stored input-major
// (wt = W^T, contiguous, so that a column of W is a contiguous row of wt), skipping it skips a
// contiguous block of memory: the kernel streams only the rows of wt of the active inputs.
//
// Kernels:
//  * compact(x, threshold): the active inputs (union over tokens of !(|x| <= threshold), so
//    NaN counts as active) and their values, zero where |x| <= threshold (TEAL's magnitude
//    sparsity with a threshold, the zeros of an activation with threshold 0);
//  * cols(xc, idx, wt, bias): y (T, out) = bias + xc (T, k) @ wt[idx] (input-major weights);
//  * rows(x, idx, w): y (T, k) = x (T, in) @ w[idx]^T, the outputs idx of w (out, in) in its
//    own nn.Linear layout (the up projection's rows behind a non-zero gate);
//  * linear(x, wts, biases, threshold, dense_above): compact, then cols for each weight (one
//    call for the gate and up projections of one input), unless more than dense_above of the
//    inputs are active: then the masked input, for the caller's dense product;
//  * linear_one(x, wt, w, bias, threshold, dense_above): linear for one weight, running the
//    dense product itself above dense_above (one call per projection from Python).
//
// Weights are float32 or bfloat16 (accumulated in float32); activations float32. Each loop is
// compiled for AVX-512, AVX2 (x86 with GCC or Clang) and portable C++ (sparse_decode_body.h),
// and the best one the CPU supports runs unless the caller names one (the tests run all
// three). cols sums each output in the order of idx whatever the thread split (threads take
// disjoint column blocks), so one and two threads give identical results.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ACTLAB_SPARSE_X86 1
#include <immintrin.h>
#endif

namespace actlab_sparse {
// bfloat16 -> float: the 16 bits are the float's upper half.
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace actlab_sparse

// ---- portable C++: eight floats per "vector", left to the compiler to vectorise ----------
namespace sd_portable {
struct V {
  float v[8];
};
constexpr int64_t kWidth = 8;
constexpr int kDotRows = 4;
inline V vzero() { V r; for (int i = 0; i < 8; ++i) r.v[i] = 0.0f; return r; }
inline V vset1(float a) { V r; for (int i = 0; i < 8; ++i) r.v[i] = a; return r; }
inline V vload(const float* p) { V r; std::memcpy(r.v, p, sizeof r.v); return r; }
inline V vload(const uint16_t* p) {
  V r;
  for (int i = 0; i < 8; ++i) r.v[i] = actlab_sparse::bf16_to_float(p[i]);
  return r;
}
inline V vfma(V a, V b, V c) { for (int i = 0; i < 8; ++i) c.v[i] += a.v[i] * b.v[i]; return c; }
inline void vstore(float* p, V a) { std::memcpy(p, a.v, sizeof a.v); }
inline float vsum(V a) {
  float s = 0.0f;
  for (int i = 0; i < 8; ++i) s += a.v[i];
  return s;
}
inline float sfma(float a, float b, float c) { return c + a * b; }
#include "sparse_decode_body.h"
}  // namespace sd_portable

#ifdef ACTLAB_SPARSE_X86
// ---- AVX2 + FMA ---------------------------------------------------------------------------
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace sd_avx2 {
using V = __m256;
constexpr int64_t kWidth = 8;
constexpr int kDotRows = 2;  // 16 registers: 2 rows x 4 tokens of accumulators
inline V vzero() { return _mm256_setzero_ps(); }
inline V vset1(float a) { return _mm256_set1_ps(a); }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline V vload(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline void vstore(float* p, V a) { _mm256_storeu_ps(p, a); }
inline float vsum(V a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}
inline float sfma(float a, float b, float c) { return std::fma(a, b, c); }
#include "sparse_decode_body.h"
}  // namespace sd_avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---- AVX-512 ------------------------------------------------------------------------------
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
#endif
namespace sd_avx512 {
using V = __m512;
constexpr int64_t kWidth = 16;
constexpr int kDotRows = 4;  // 32 registers: 4 rows x 4 tokens of accumulators
inline V vzero() { return _mm512_setzero_ps(); }
inline V vset1(float a) { return _mm512_set1_ps(a); }
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline V vload(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline void vstore(float* p, V a) { _mm512_storeu_ps(p, a); }
inline float vsum(V a) { return _mm512_reduce_add_ps(a); }
inline float sfma(float a, float b, float c) { return std::fma(a, b, c); }
#include "sparse_decode_body.h"
}  // namespace sd_avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // ACTLAB_SPARSE_X86

namespace {

using Tensor = torch::Tensor;

enum Isa : int64_t { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

bool isa_supported(int64_t isa) {
  if (isa == kPortable) return true;
#ifdef ACTLAB_SPARSE_X86
  __builtin_cpu_init();
  if (isa == kAvx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == kAvx512) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
#endif
  return false;
}

int64_t best_isa() {
  static const int64_t best = isa_supported(kAvx512) ? kAvx512
                              : isa_supported(kAvx2) ? kAvx2
                                                     : kPortable;
  return best;
}

// -1: the best the CPU supports; otherwise the named one, which must be supported.
int64_t resolve_isa(int64_t isa) {
  if (isa < 0) return best_isa();
  TORCH_CHECK(isa <= kAvx512 && isa_supported(isa), "sparse decode: instruction set ", isa,
              " is not supported on this CPU (best: ", best_isa(), ")");
  return isa;
}

bool is_bf16(const Tensor& w) { return w.scalar_type() == at::kBFloat16; }

void check_weight(const Tensor& w, const char* name) {
  TORCH_CHECK(w.device().is_cpu(), name, ": weights must be on the CPU");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), name, ": weights must be a contiguous matrix");
  TORCH_CHECK(w.scalar_type() == at::kFloat || is_bf16(w), name,
              ": weights must be float32 or bfloat16, got ", w.scalar_type());
}

void check_activations(const Tensor& x, const char* name) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 2 &&
                  x.is_contiguous(),
              name, ": activations must be a contiguous float32 CPU matrix (tokens, features)");
}

void check_index(const Tensor& idx, int64_t limit, const char* name) {
  TORCH_CHECK(idx.device().is_cpu() && idx.scalar_type() == at::kLong && idx.dim() == 1 &&
                  idx.is_contiguous(),
              name, ": idx must be a contiguous int64 CPU vector");
  const int64_t* p = idx.const_data_ptr<int64_t>();
  for (int64_t j = 0; j < idx.numel(); ++j) {
    TORCH_CHECK(p[j] >= 0 && p[j] < limit, name, ": idx[", j, "] = ", p[j],
                " is outside [0, ", limit, ")");
  }
}

// Output columns per block: the T x B accumulators stay in L2 (128 KiB), and at least one
// block per thread once the problem is large enough to be worth splitting. Wide blocks keep
// each weight row's segment long, which the hardware prefetcher streams best (measured here:
// at 8 tokens, blocks of 4096 columns read 1.7x faster than blocks of 768).
int64_t column_blocks(int64_t T, int64_t k, int64_t out) {
  const int64_t b_max = std::max<int64_t>(256, (32768 / std::max<int64_t>(T, 1)) / 16 * 16);
  int64_t blocks = (out + b_max - 1) / b_max;
  if (k * out * T >= (int64_t{1} << 16)) {
    blocks = std::max<int64_t>(blocks, at::get_num_threads());
  }
  return std::max<int64_t>(1, std::min<int64_t>(blocks, (out + 15) / 16));
}

}  // namespace

// v's bits where v is kept (!(|v| <= thr): NaN is kept), else 0 (+0.0f); and as a float.
// Branch-free on purpose: which entries fall under the threshold changes from call to call,
// and a branch per entry mispredicts about as often as the share is near one half (measured
// on our GPT's 8 x 512 down inputs: a branching mask took 3x the time of all-active ones).
inline uint32_t kept_bits(float v, float thr) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u & (0u - static_cast<uint32_t>(!(std::fabs(v) <= thr)));
}

inline float kept(float v, float thr) {
  const uint32_t u = kept_bits(v, thr);
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// The union over the T tokens of x (T, n) of the inputs with !(|x| <= thr), ascending.
// Branch-free (see kept_bits): a token-by-token OR of row flags, then a compaction that writes
// every index and advances by its flag.
std::vector<int64_t> union_active(const float* xp, int64_t T, int64_t n, float thr) {
  std::vector<uint8_t> any(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = xp + t * n;
    for (int64_t i = 0; i < n; ++i) any[i] |= static_cast<uint8_t>(!(std::fabs(row[i]) <= thr));
  }
  std::vector<int64_t> active(static_cast<size_t>(n));
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    active[k] = i;
    k += any[i];
  }
  active.resize(static_cast<size_t>(k));
  return active;
}

// Active inputs of x (T, in) and their kept values: idx (k,) ascending, xc (T, k).
std::vector<Tensor> compact(const Tensor& x, double threshold) {
  check_activations(x, "compact");
  const int64_t T = x.size(0), n = x.size(1);
  const float thr = static_cast<float>(threshold);
  const float* xp = x.const_data_ptr<float>();
  const std::vector<int64_t> active = union_active(xp, T, n, thr);
  const int64_t k = static_cast<int64_t>(active.size());
  Tensor idx = torch::empty({k}, x.options().dtype(at::kLong));
  std::copy(active.begin(), active.end(), idx.mutable_data_ptr<int64_t>());
  Tensor xc = torch::empty({T, k}, x.options());
  float* cp = xc.mutable_data_ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      cp[t * k + j] = kept(xp[t * n + active[j]], thr);
    }
  }
  return {idx, xc};
}

// y (T, out) = bias + xc (T, k) @ wt[idx] on raw pointers; threads take column blocks.
void run_cols(const float* xp, int64_t T, int64_t k, const int64_t* ip, const Tensor& wt,
              const float* bp, float* yp, int64_t isa) {
  const int64_t use = resolve_isa(isa), out = wt.size(1);
  const void* wp = wt.const_data_ptr();
  const bool bf16 = is_bf16(wt);
  const int64_t blocks = column_blocks(T, k, out);
  const int64_t width = ((out + blocks - 1) / blocks + 15) / 16 * 16;
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = std::min(out, b * width), c1 = std::min(out, c0 + width);
      if (c0 >= c1) continue;
#ifdef ACTLAB_SPARSE_X86
      if (use == kAvx512) { sd_avx512::cols(xp, T, k, ip, wp, bf16, out, bp, yp, c0, c1); continue; }
      if (use == kAvx2) { sd_avx2::cols(xp, T, k, ip, wp, bf16, out, bp, yp, c0, c1); continue; }
#endif
      sd_portable::cols(xp, T, k, ip, wp, bf16, out, bp, yp, c0, c1);
    }
  });
}

const float* bias_pointer(const c10::optional<Tensor>& bias, int64_t out, const char* name) {
  if (!bias.has_value() || !bias->defined()) return nullptr;
  TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                  bias->numel() == out,
              name, ": bias must be a contiguous float32 vector of ", out);
  return bias->const_data_ptr<float>();
}

// y (T, out) = bias + xc (T, k) @ wt[idx], wt (in, out) input-major.
Tensor cols(const Tensor& xc, const Tensor& idx, const Tensor& wt,
            const c10::optional<Tensor>& bias, int64_t isa) {
  check_activations(xc, "cols");
  check_weight(wt, "cols");
  check_index(idx, wt.size(0), "cols");
  TORCH_CHECK(xc.size(1) == idx.numel(), "cols: xc has ", xc.size(1), " columns, idx ",
              idx.numel());
  Tensor y = torch::empty({xc.size(0), wt.size(1)}, xc.options());
  run_cols(xc.const_data_ptr<float>(), xc.size(0), idx.numel(), idx.const_data_ptr<int64_t>(),
           wt, bias_pointer(bias, wt.size(1), "cols"), y.mutable_data_ptr<float>(), isa);
  return y;
}

// y (T, k) = x (T, in) @ w[idx]^T, w (out, in) in nn.Linear layout.
Tensor rows(const Tensor& x, const Tensor& idx, const Tensor& w, int64_t isa) {
  check_activations(x, "rows");
  check_weight(w, "rows");
  check_index(idx, w.size(0), "rows");
  TORCH_CHECK(x.size(1) == w.size(1), "rows: x has ", x.size(1), " features, w ", w.size(1));
  const int64_t T = x.size(0), in = x.size(1), k = idx.numel();
  Tensor y = torch::empty({T, k}, x.options());
  const int64_t use = resolve_isa(isa);
  const float* xp = x.const_data_ptr<float>();
  const int64_t* ip = idx.const_data_ptr<int64_t>();
  const void* wp = w.const_data_ptr();
  const bool bf16 = is_bf16(w);
  float* yp = y.mutable_data_ptr<float>();
  // Small problems stay on one thread (a parallel region costs a few microseconds).
  const int64_t grain = k * in * T < (int64_t{1} << 16) ? std::max<int64_t>(k, 1) : 64;
  at::parallel_for(0, k, grain, [&](int64_t j0, int64_t j1) {
#ifdef ACTLAB_SPARSE_X86
    if (use == kAvx512) { sd_avx512::rows(xp, T, in, ip, wp, bf16, yp, k, j0, j1); return; }
    if (use == kAvx2) { sd_avx2::rows(xp, T, in, ip, wp, bf16, yp, k, j0, j1); return; }
#endif
    sd_portable::rows(xp, T, in, ip, wp, bf16, yp, k, j0, j1);
  });
  return y;
}

// xc (T, k): the values of the active inputs, zero where |x| <= thr.
std::vector<float> compacted(const float* xp, int64_t T, int64_t n,
                             const std::vector<int64_t>& active, float thr) {
  const int64_t k = static_cast<int64_t>(active.size());
  std::vector<float> xc(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      xc[t * k + j] = kept(xp[t * n + active[j]], thr);
    }
  }
  return xc;
}

// mask(x) in x's shape and dtype, from flat (x as a float32 (T, n) matrix).
Tensor masked_input(const Tensor& x, const Tensor& flat, float thr) {
  const float* xp = flat.const_data_ptr<float>();
  Tensor masked = torch::empty_like(flat);
  float* mp = masked.mutable_data_ptr<float>();
  for (int64_t i = 0; i < flat.numel(); ++i) mp[i] = kept(xp[i], thr);
  return masked.to(x.scalar_type()).reshape(x.sizes());
}

// Several products of one input (the gate and up projections read the same x): with
// mask(x) zero where |x| <= threshold, ys[i] = biases[i] + mask(x) @ wts[i] reading only the
// rows of the active inputs. x is (..., n), float32 or bfloat16 (computed in float32), and
// each y is (..., out) in x's dtype. When more than dense_above of the inputs are active the
// products are left to the caller's dense kernel: ys is then empty and masked is mask(x) in
// x's shape and dtype (undefined, i.e. None, when threshold is 0: x itself is mask(x)).
std::tuple<std::vector<Tensor>, Tensor> linear(const Tensor& x, const std::vector<Tensor>& wts,
                                               const std::vector<c10::optional<Tensor>>& biases,
                                               double threshold, double dense_above,
                                               int64_t isa) {
  TORCH_CHECK(x.dim() >= 1 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
              "linear: x must be float32 or bfloat16 with a feature dimension");
  TORCH_CHECK(wts.size() == biases.size(), "linear: ", wts.size(), " weights and ",
              biases.size(), " biases");
  const int64_t n = x.size(-1);
  for (const auto& wt : wts) {
    TORCH_CHECK(wt.dim() == 2 && n == wt.size(0), "linear: x has ", n,
                " features, a weight has ", wt.size(0), " rows");
  }
  for (const auto& wt : wts) check_weight(wt, "linear");
  const Tensor flat = x.reshape({-1, n}).to(at::kFloat).contiguous();
  const int64_t T = flat.size(0);
  const float thr = static_cast<float>(threshold);
  const float* xp = flat.const_data_ptr<float>();
  const std::vector<int64_t> active = union_active(xp, T, n, thr);
  const int64_t k = static_cast<int64_t>(active.size());
  std::vector<Tensor> ys;
  if (static_cast<double>(k) > dense_above * static_cast<double>(n)) {
    if (threshold == 0.0) return {ys, Tensor()};
    return {ys, masked_input(x, flat, thr)};
  }
  const std::vector<float> xc = compacted(xp, T, n, active, thr);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (size_t i = 0; i < wts.size(); ++i) {
    Tensor bias;
    if (biases[i].has_value() && biases[i]->defined()) {
      bias = biases[i]->to(at::kFloat).contiguous();
    }
    const int64_t out = wts[i].size(1);
    Tensor y = torch::empty({T, out}, flat.options());
    run_cols(xc.data(), T, k, active.data(), wts[i],
             bias_pointer(bias.defined() ? c10::optional<Tensor>(bias) : c10::nullopt, out,
                          "linear"),
             y.mutable_data_ptr<float>(), isa);
    shape.back() = out;
    ys.push_back(y.to(x.scalar_type()).reshape(shape));
  }
  return {ys, Tensor()};
}

// One projection, the dense product included, in one call (on small layers the per-call cost
// is what decides): y = bias + mask(x) @ wt reading only the active inputs' rows of wt (in,
// out), or, when more than dense_above of the inputs are active, torch's dense product of
// mask(x) in wt's dtype (on w, the nn.Linear layout, when given: as the unmodified layer
// runs). x is (..., n), float32 or bfloat16; y is (..., out) in x's dtype (in wt's dtype when
// the dense product runs, which the caller allows only where the two are equal).
Tensor linear_one(const Tensor& x, const Tensor& wt, const c10::optional<Tensor>& w,
                  const c10::optional<Tensor>& bias, double threshold, double dense_above,
                  int64_t isa) {
  TORCH_CHECK(x.dim() >= 1 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
              "linear: x must be float32 or bfloat16 with a feature dimension");
  const int64_t n = x.size(-1);
  TORCH_CHECK(wt.dim() == 2 && n == wt.size(0), "linear: x has ", n, " features, the weight has ",
              wt.size(0), " rows");
  check_weight(wt, "linear");
  const Tensor flat = x.reshape({-1, n}).to(at::kFloat).contiguous();
  const int64_t T = flat.size(0), out = wt.size(1);
  const float thr = static_cast<float>(threshold);
  const float* xp = flat.const_data_ptr<float>();
  const std::vector<int64_t> active = union_active(xp, T, n, thr);
  const int64_t k = static_cast<int64_t>(active.size());
  const bool has_bias = bias.has_value() && bias->defined();
  if (static_cast<double>(k) > dense_above * static_cast<double>(n)) {
    const Tensor xm = (threshold == 0.0 ? x : masked_input(x, flat, thr)).to(wt.scalar_type());
    if (w.has_value() && w->defined()) return at::linear(xm, *w, bias);
    const Tensor y = at::matmul(xm, wt);
    return has_bias ? y + *bias : y;
  }
  const std::vector<float> xc = compacted(xp, T, n, active, thr);
  Tensor b;
  if (has_bias) b = bias->to(at::kFloat).contiguous();
  Tensor y = torch::empty({T, out}, flat.options());
  run_cols(xc.data(), T, k, active.data(), wt,
           bias_pointer(b.defined() ? c10::optional<Tensor>(b) : c10::nullopt, out, "linear"),
           y.mutable_data_ptr<float>(), isa);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out;
  return y.to(x.scalar_type()).reshape(shape);
}

std::vector<bool> supported() {
  return {isa_supported(kPortable), isa_supported(kAvx2), isa_supported(kAvx512)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("compact", &compact, "active inputs (union over tokens) and their kept values");
  m.def("cols", &cols, "bias + xc @ wt[idx] (input-major weights)");
  m.def("rows", &rows, "x @ w[idx]^T (rows of nn.Linear-layout weights)");
  m.def("linear", &linear, "compact, then cols for each weight, or the masked input for dense");
  m.def("linear_one", &linear_one, "one projection: the kernel, or the dense product above "
        "dense_above");
  m.def("best_isa", &best_isa, "0 portable, 1 AVX2, 2 AVX-512: the best this CPU runs");
  m.def("supported", &supported, "per instruction set (portable, AVX2, AVX-512): supported");
}
