// Per-group order statistics in linear time, and the two layers built on them:
//
// * Percentile Centering (forward and backward fused): per group, mean, variance, the order
//   statistics a quantile interpolates between, and the normalised output, with the data of
//   one group in cache; the backward is LayerNorm's plus the percentile term, which reaches
//   only the one or two selected elements (as through torch.quantile).
// * Top-K masking: per row, the k-th largest value by selection and one masking pass,
//   instead of a full torch.topk and a scatter.
//
// Selection is quickselect with branchless partitions. On long groups it first samples the
// group, brackets the wanted rank between two sample order statistics, and copies only the
// values inside the bracket in one branchless pass; if the bracket misses (rare), it selects
// over a full copy. NaN sorts above everything, as in torch.sort/torch.topk.
//
// A group is x[a, g, b] for all a < A, b < B of x viewed as (A, G, B): rows of the last dim
// are (1, rows, n), channels of (N, C, *) are (N, C, S). Its k-th element is a = k / B, b = k % B.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "activation_functors.h"

namespace {

using at::vec::Vectorized;

template <typename T>
inline bool is_nan(T v) { return v != v; }

// torch.lerp's formula, so centres agree exactly with torch.quantile's interpolation.
template <typename T>
inline T lerp(T a, T b, T w) {
  return std::abs(w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

// The order statistics of 0-based ranks k and (if need_above) k + 1 of a[0..m), no NaN in a:
// quickselect with branchless out-of-place three-way partitions (std::nth_element's branches
// mispredict on random data). a and tmp (room for m values) are clobbered.
template <typename T>
void quickselect_pair(T* a, T* tmp, int64_t m, int64_t k, bool need_above, T& kth, T& next) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  T bound = inf;  // the smallest value discarded above the window
  auto min_of = [](const T* p, int64_t len) { return *std::min_element(p, p + len); };
  for (int round = 0; m > 16 && round < 64; ++round) {
    const T x0 = a[0], x1 = a[m / 2], x2 = a[m - 1];
    const T pivot = std::max(std::min(x0, x1), std::min(std::max(x0, x1), x2));
    int64_t less = 0, greater = 0;
    for (int64_t j = 0; j < m; ++j) {
      const T v = a[j];
      a[less] = v;  // less <= j: never overwrites an unread value
      tmp[greater] = v;
      less += v < pivot;
      greater += v > pivot;
    }
    const int64_t equal = m - less - greater;
    if (k < less) {
      bound = std::min(bound, equal > 0 ? pivot : min_of(tmp, greater));
      m = less;
    } else if (k < less + equal) {
      kth = pivot;
      if (need_above) {
        next = k + 1 < less + equal ? pivot : std::min(bound, greater > 0 ? min_of(tmp, greater) : inf);
      }
      return;
    } else {
      k -= less + equal;
      std::swap(a, tmp);
      m = greater;
    }
  }
  std::nth_element(a, a + k, a + m);
  kth = a[k];
  if (need_above) next = k + 1 < m ? min_of(a + k + 1, m - k - 1) : bound;
}

#if defined(__AVX2__)
// For each 8-bit mask, the lanes whose bit is set, first: a left-packing permutation.
struct PackTable {
  alignas(32) int32_t lanes[256][8];
  PackTable() {
    for (int mask = 0; mask < 256; ++mask) {
      int c = 0;
      for (int b = 0; b < 8; ++b) {
        if (mask >> b & 1) lanes[mask][c++] = b;
      }
      while (c < 8) lanes[mask][c++] = 0;
    }
  }
};
const PackTable kPack;
#endif

// One pass over v[0..m): counts the values below lo into `under`, copies those in [lo, hi]
// to out (room for m + 8) and returns their count, or -1 if v holds a NaN.
template <typename T>
int64_t bracket_pass(const T* v, int64_t m, T lo, T hi, T* out, int64_t& under) {
  int64_t inside = 0, below = 0, nans = 0, j = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    // eight at a time: compare, then left-pack the lanes inside with one permutation
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (; j + 8 <= m; j += 8) {
      const __m256 x = _mm256_loadu_ps(v + j);
      const int lt = _mm256_movemask_ps(_mm256_cmp_ps(x, vlo, _CMP_LT_OQ));
      const int in = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(x, vlo, _CMP_GE_OQ),
                                                      _mm256_cmp_ps(x, vhi, _CMP_LE_OQ)));
      nans |= _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPack.lanes[in]));
      _mm256_storeu_ps(out + inside, _mm256_permutevar8x32_ps(x, perm));
      inside += __builtin_popcount(in);
      below += __builtin_popcount(lt);
    }
  }
#endif
  for (; j < m; ++j) {  // branchless: compilers keep this loop tight
    const T x = v[j];
    out[inside] = x;
    inside += (x >= lo) & (x <= hi);
    below += x < lo;
    nans += is_nan(x);
  }
  under = below;
  return nans ? -1 : inside;
}

// The ascending order statistics of 0-based ranks `rank` and (if need_above) rank + 1 of
// v[0..m). Returns false, leaving them unset, if v holds a NaN. scratch has room for
// 2m + 16 values.
//
// While the window holding the ranks is long, a sample of it brackets them between two of
// its order statistics and one pass keeps only the values inside; a miss (rare) or a window
// that no longer shrinks ends the bracketing, and quickselect finishes the window.
template <typename T>
bool select_pair(const T* v, int64_t m, int64_t rank, bool need_above, T* scratch, T& below,
                 T& above) {
  // bracketing pays off on long windows (measured: 4x at 65536, none at 1024)
  constexpr int64_t kMaxSample = 256, kMinBracket = 2048;
  constexpr T inf = std::numeric_limits<T>::infinity();
  T* buffers[2] = {scratch, scratch + m + 8};
  const T* window = v;  // v itself until the first pass copies a window out of it
  int which = 0;
  int64_t len = m, r = rank;
  while (len > kMinBracket) {
    const int64_t last = need_above ? r + 1 : r;
    const int64_t s = std::min<int64_t>(kMaxSample, std::max<int64_t>(
        32, static_cast<int64_t>(2.0 * std::sqrt(static_cast<double>(len)))));
    T sample[kMaxSample];
    const int64_t stride = len / s;
    for (int64_t i = 0; i < s; ++i) {
      sample[i] = window[i * stride + stride / 2];
      if (is_nan(sample[i])) return false;
    }
    // the ranks fall, in the sample, near s * r / len; 2.5 standard deviations of a sample
    // rank (binomial) on either side almost always bracket them
    const double p_lo = (r + 0.5) / len, p_hi = (last + 0.5) / len;
    const double spread = 2.5 * std::sqrt(s * std::max(p_lo * (1 - p_lo), p_hi * (1 - p_hi))) + 1;
    const int64_t lo_i = static_cast<int64_t>(std::floor(p_lo * s - spread));
    const int64_t hi_i = static_cast<int64_t>(std::ceil(p_hi * s + spread));
    T lo = -inf, hi = inf;
    if (lo_i > 0) {
      std::nth_element(sample, sample + lo_i, sample + s);
      lo = sample[lo_i];
    }
    if (hi_i < s - 1) {
      const int64_t from = lo_i > 0 ? lo_i : 0;
      std::nth_element(sample + from, sample + hi_i, sample + s);
      hi = sample[hi_i];
    }
    int64_t under = 0;
    T* out = buffers[which];
    const int64_t inside = bracket_pass(window, len, lo, hi, out, under);
    if (inside < 0) return false;
    if (!(under <= r && last < under + inside)) break;  // missed: finish this window
    const bool shrank = inside < len * 3 / 4;
    window = out;
    len = inside;
    r -= under;
    which ^= 1;
    if (!shrank) break;
  }
  // the window is v, or the buffer last written (the other one is free)
  T* a = buffers[which ^ 1];
  if (window == v) {
    a = buffers[which];
    for (int64_t j = 0; j < m; ++j) {
      if (is_nan(v[j])) return false;
      a[j] = v[j];
    }
  }
  quickselect_pair(a, a == buffers[0] ? buffers[1] : buffers[0], len, r, need_above, below, above);
  return true;
}

template <typename T>
T first_lane(const Vectorized<T>& v) {
  T buf[Vectorized<T>::size()];
  v.store(buf);
  return buf[0];
}

// Sum over j < n of vec_term(j, width) (a vector of `width` terms from j; width 1 for the
// tail), in vector lanes flushed to double every block: a long sum stays accurate.
template <typename T, typename F>
double block_sum(int64_t n, F&& vec_term) {
  using V = Vectorized<T>;
  constexpr int64_t kBlock = 1024;
  double total = 0;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    V acc(T(0));
    int64_t j = start;
    for (; j + V::size() <= end; j += V::size()) acc = acc + vec_term(j, V::size());
    T tail = 0;
    for (; j < end; ++j) tail += first_lane<T>(vec_term(j, 1));
    total += static_cast<double>(actlab::lanes_sum(acc)) + static_cast<double>(tail);
  }
  return total;
}

struct GroupView {
  int64_t A, G, B;
  int64_t n() const { return A * B; }
  int64_t offset(int64_t g, int64_t k) const { return (k / B) * G * B + g * B + k % B; }
};

GroupView group_view(const torch::Tensor& x, bool last) {
  if (last) {
    const int64_t n = x.size(-1);
    return {1, n ? x.numel() / n : 0, n};
  }
  const int64_t A = x.size(0), G = x.size(1);
  return {A, G, A * G ? x.numel() / (A * G) : 0};
}

template <typename T>
T load_or(const torch::Tensor& t, int64_t i, T fallback) {
  return t.defined() ? t.const_data_ptr<T>()[i] : fallback;
}

}  // namespace

// Percentile Centering forward: returns y, center, var (biased), mean, rstd (all per group,
// shape (G,)) and the group-linear indices of the selected order statistics, (G, 1) each.
std::vector<torch::Tensor> percentile_norm_forward(
    const torch::Tensor& x, const c10::optional<torch::Tensor>& weight_opt,
    const c10::optional<torch::Tensor>& bias_opt, bool last, int64_t lower, double frac,
    double eps) {
  actlab::check_dense_float(x, "percentile_norm_forward");
  const torch::Tensor weight = weight_opt.has_value() ? weight_opt->contiguous() : torch::Tensor();
  const torch::Tensor bias = bias_opt.has_value() ? bias_opt->contiguous() : torch::Tensor();
  const GroupView view = group_view(x, last);
  const int64_t n = view.n(), G = view.G;
  TORCH_CHECK(n > 0 && 0 <= lower && lower < n, "percentile_norm_forward: bad rank");
  const bool need_above = frac > 0.0;
  TORCH_CHECK(!need_above || lower + 1 < n, "percentile_norm_forward: bad rank");
  auto y = torch::empty_like(x);
  auto stat = [&] { return torch::empty({G}, x.options()); };
  auto center = stat(), var = stat(), mean = stat(), rstd = stat();
  auto idx_options = x.options().dtype(torch::kLong);
  auto below_idx = torch::empty({G, 1}, idx_options), above_idx = torch::empty({G, 1}, idx_options);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "percentile_norm_forward", [&] {
    using T = scalar_t;
    using V = Vectorized<T>;
    const T* xp = x.const_data_ptr<T>();
    T* yp = y.mutable_data_ptr<T>();
    const T* wp = weight.defined() ? weight.const_data_ptr<T>() : nullptr;
    const T* bp = bias.defined() ? bias.const_data_ptr<T>() : nullptr;
    at::parallel_for(0, G, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> buffer(view.A > 1 ? n : 0), scratch(2 * n + 16);
      for (int64_t g = begin; g < end; ++g) {
        // the group, contiguous: rows of the last dim already are; channels are gathered
        const T* v = xp + g * view.B;
        if (view.A > 1) {
          for (int64_t a = 0; a < view.A; ++a) {
            std::copy_n(xp + a * G * view.B + g * view.B, view.B, buffer.data() + a * view.B);
          }
          v = buffer.data();
        }
        const T mu = static_cast<T>(block_sum<T>(n, [&](int64_t j, int64_t w) {
          return w == 1 ? V(v[j]) : V::loadu(v + j); }) / n);
        const V vmu(mu);
        const T sigma2 = static_cast<T>(block_sum<T>(n, [&](int64_t j, int64_t w) {
          const V d = (w == 1 ? V(v[j]) : V::loadu(v + j)) - vmu;
          return d * d; }) / n);
        const T r = T(1) / std::sqrt(sigma2 + static_cast<T>(eps));
        T lo = 0, hi = 0, c = std::numeric_limits<T>::quiet_NaN();
        int64_t bi = 0, ai = 0;
        if (select_pair(v, n, lower, need_above, scratch.data(), lo, hi)) {
          c = need_above ? lerp(lo, hi, static_cast<T>(frac)) : lo;
          // indices: the first element equal to each statistic (a tied upper one: the next)
          bi = std::find(v, v + n, lo) - v;
          ai = bi;
          if (need_above) ai = (hi == lo ? std::find(v + bi + 1, v + n, hi) : std::find(v, v + n, hi)) - v;
        }
        mean.mutable_data_ptr<T>()[g] = mu;
        var.mutable_data_ptr<T>()[g] = sigma2;
        rstd.mutable_data_ptr<T>()[g] = r;
        center.mutable_data_ptr<T>()[g] = c;
        below_idx.mutable_data_ptr<int64_t>()[g] = bi;
        above_idx.mutable_data_ptr<int64_t>()[g] = ai;
        // y = (x - c) * r * w + b
        for (int64_t a = 0; a < view.A; ++a) {
          const int64_t base = a * G * view.B + g * view.B;
          const T* xr = xp + base;
          T* yr = yp + base;
          if (last) {
            int64_t j = 0;
            const V vc(c), vr(r);
            for (; j + V::size() <= view.B; j += V::size()) {
              V out = (V::loadu(xr + j) - vc) * vr;
              if (wp) out = out * V::loadu(wp + j);
              if (bp) out = out + V::loadu(bp + j);
              out.store(yr + j);
            }
            for (; j < view.B; ++j) {
              yr[j] = (xr[j] - c) * r * (wp ? wp[j] : T(1)) + (bp ? bp[j] : T(0));
            }
          } else {
            const T scale = r * (wp ? wp[g] : T(1));
            const T shift = (bp ? bp[g] : T(0)) - c * scale;
            const V vs(scale), vt(shift);
            int64_t j = 0;
            for (; j + V::size() <= view.B; j += V::size()) {
              at::vec::fmadd(V::loadu(xr + j), vs, vt).store(yr + j);
            }
            for (; j < view.B; ++j) yr[j] = xr[j] * scale + shift;
          }
        }
      }
    });
  });
  return {y, center, var, mean, rstd, below_idx, above_idx};
}

// Its backward: grad_x, grad_weight, grad_bias (undefined when not asked for).
std::vector<torch::Tensor> percentile_norm_backward(
    const torch::Tensor& grad_in, const torch::Tensor& x,
    const c10::optional<torch::Tensor>& weight_opt, const torch::Tensor& center,
    const torch::Tensor& mean, const torch::Tensor& rstd, const torch::Tensor& below_idx,
    const torch::Tensor& above_idx, double frac, bool last, bool need_weight, bool need_bias) {
  const torch::Tensor grad = grad_in.contiguous();
  actlab::check_dense_float(x, "percentile_norm_backward");
  const torch::Tensor weight = weight_opt.has_value() ? weight_opt->contiguous() : torch::Tensor();
  const GroupView view = group_view(x, last);
  const int64_t n = view.n(), G = view.G;
  const int64_t affine_n = last ? n : G;
  auto grad_x = torch::empty_like(x);
  auto acc_options = x.options().dtype(torch::kDouble);
  auto grad_w = torch::zeros({affine_n}, acc_options), grad_b = torch::zeros({affine_n}, acc_options);
  std::mutex merge;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "percentile_norm_backward", [&] {
    using T = scalar_t;
    using V = Vectorized<T>;
    const T* xp = x.const_data_ptr<T>();
    const T* gp = grad.const_data_ptr<T>();
    T* gxp = grad_x.mutable_data_ptr<T>();
    const T* wp = weight.defined() ? weight.const_data_ptr<T>() : nullptr;
    const T fr = static_cast<T>(frac);
    at::parallel_for(0, G, 1, [&](int64_t begin, int64_t end) {
      // this chunk's share of the affine gradients (per feature for rows of the last dim)
      std::vector<double> part_w(affine_n, 0.0), part_b(affine_n, 0.0);
      std::vector<T> row_w(last ? n : 0, T(0)), row_b(last ? n : 0, T(0));
      int64_t rows_in_block = 0;
      auto flush = [&] {
        for (int64_t j = 0; j < (last ? n : 0); ++j) {
          part_w[j] += row_w[j];
          part_b[j] += row_b[j];
          row_w[j] = row_b[j] = T(0);
        }
        rows_in_block = 0;
      };
      for (int64_t g = begin; g < end; ++g) {
        const T c = center.const_data_ptr<T>()[g], mu = mean.const_data_ptr<T>()[g];
        const T r = rstd.const_data_ptr<T>()[g];
        const V vc(c), vr(r);
        double sum_g = 0, sum_gx = 0, sum_raw_gx = 0, sum_raw_g = 0;
        for (int64_t a = 0; a < view.A; ++a) {
          const int64_t base = a * G * view.B + g * view.B;
          const T* xr = xp + base;
          const T* gr = gp + base;
          if (last) {
            // sums of w*g and w*g*x_hat; per-feature g*x_hat and g for the affine gradients
            V acc_g(T(0)), acc_gx(T(0));
            int64_t j = 0;
            for (; j + V::size() <= view.B; j += V::size()) {
              const V gv = V::loadu(gr + j);
              const V xh = (V::loadu(xr + j) - vc) * vr;
              const V gh = wp ? gv * V::loadu(wp + j) : gv;
              acc_g = acc_g + gh;
              acc_gx = acc_gx + gh * xh;
              (V::loadu(row_w.data() + j) + gv * xh).store(row_w.data() + j);
              (V::loadu(row_b.data() + j) + gv).store(row_b.data() + j);
            }
            T tail_g = 0, tail_gx = 0;
            for (; j < view.B; ++j) {
              const T xh = (xr[j] - c) * r;
              const T gh = gr[j] * (wp ? wp[j] : T(1));
              tail_g += gh;
              tail_gx += gh * xh;
              row_w[j] += gr[j] * xh;
              row_b[j] += gr[j];
            }
            sum_g += static_cast<double>(actlab::lanes_sum(acc_g)) + tail_g;
            sum_gx += static_cast<double>(actlab::lanes_sum(acc_gx)) + tail_gx;
          } else {
            sum_raw_g += block_sum<T>(view.B, [&](int64_t j, int64_t w) {
              return w == 1 ? V(gr[j]) : V::loadu(gr + j); });
            sum_raw_gx += block_sum<T>(view.B, [&](int64_t j, int64_t w) {
              const V xv = w == 1 ? V(xr[j]) : V::loadu(xr + j);
              return (w == 1 ? V(gr[j]) : V::loadu(gr + j)) * ((xv - vc) * vr); });
          }
        }
        if (last) {
          if (++rows_in_block == 64) flush();
        } else {
          const T w = wp ? wp[g] : T(1);
          part_w[g] += sum_raw_gx;
          part_b[g] += sum_raw_g;
          sum_g = sum_raw_g * w;
          sum_gx = sum_raw_gx * w;
        }
        // grad_x = r * (w*g - (x - mean) * r * sum_gx / n), plus the percentile term below
        const T k = r * static_cast<T>(sum_gx / n);
        const V vk(k), vmu(mu);
        for (int64_t a = 0; a < view.A; ++a) {
          const int64_t base = a * G * view.B + g * view.B;
          const T* xr = xp + base;
          const T* gr = gp + base;
          T* out = gxp + base;
          int64_t j = 0;
          if (last) {
            for (; j + V::size() <= view.B; j += V::size()) {
              const V gh = wp ? V::loadu(gr + j) * V::loadu(wp + j) : V::loadu(gr + j);
              ((gh - (V::loadu(xr + j) - vmu) * vk) * vr).store(out + j);
            }
            for (; j < view.B; ++j) out[j] = (gr[j] * (wp ? wp[j] : T(1)) - (xr[j] - mu) * k) * r;
          } else {
            const T w = wp ? wp[g] : T(1);
            const V vw(w);
            for (; j + V::size() <= view.B; j += V::size()) {
              ((V::loadu(gr + j) * vw - (V::loadu(xr + j) - vmu) * vk) * vr).store(out + j);
            }
            for (; j < view.B; ++j) out[j] = (gr[j] * w - (xr[j] - mu) * k) * r;
          }
        }
        const T coef = -static_cast<T>(sum_g) * r;
        gxp[view.offset(g, below_idx.const_data_ptr<int64_t>()[g])] += coef * (T(1) - fr);
        if (frac > 0.0) gxp[view.offset(g, above_idx.const_data_ptr<int64_t>()[g])] += coef * fr;
      }
      if (last) flush();
      std::lock_guard<std::mutex> lock(merge);
      double* gw = grad_w.mutable_data_ptr<double>();
      double* gb = grad_b.mutable_data_ptr<double>();
      for (int64_t j = 0; j < affine_n; ++j) {
        gw[j] += part_w[j];
        gb[j] += part_b[j];
      }
    });
  });
  return {grad_x, need_weight ? grad_w.to(x.scalar_type()) : torch::Tensor(),
          need_bias ? grad_b.to(x.scalar_type()) : torch::Tensor()};
}

// Whether Top-K drops value v against the threshold t (the k-th largest; NaN is largest).
template <typename T>
inline bool below_threshold(T v, T t) {
  return is_nan(t) ? !is_nan(v) : v < t;
}

// out = src where Top-K keeps the entry of row, else 0: what lies below the threshold t, and
// the last of the ties at t beyond k (one rule, forward with src = row and backward with
// src = the gradient).
template <typename T>
void mask_row(const T* row, const T* src, T* out, int64_t n, T t, int64_t k) {
  using V = Vectorized<T>;
  int64_t below = 0, j = 0;
  if (!is_nan(t)) {
    const V vt(t), zero(T(0)), one(T(1));
    V counts(T(0));
    for (; j + V::size() <= n; j += V::size()) {
      const V lt = V::loadu(row + j) < vt;  // false for NaN
      counts = counts + (lt & one);
      V::blendv(V::loadu(src + j), zero, lt).store(out + j);
    }
    below = static_cast<int64_t>(actlab::lanes_sum(counts));
  }
  for (; j < n; ++j) {
    const bool drop = below_threshold(row[j], t);
    out[j] = drop ? T(0) : src[j];
    below += drop;
  }
  for (int64_t i = n - 1, excess = n - below - k; excess > 0 && i >= 0; --i) {
    if (row[i] == t || (is_nan(t) && is_nan(row[i]))) {
      out[i] = T(0);
      --excess;
    }
  }
}

// Top-K along the last dim: keeps exactly k entries of each row (all above the k-th largest,
// NaN counting as largest, and the first of the ties at it), zeroes the rest. Returns the
// output and each row's threshold (for the backward).
std::vector<torch::Tensor> topk_mask(const torch::Tensor& y, int64_t k) {
  actlab::check_dense_float(y, "topk_mask");
  const int64_t n = y.size(-1);
  TORCH_CHECK(0 < k && k <= n, "topk_mask: k must be in [1, n]");
  const int64_t rows = y.numel() / n;
  auto out = torch::empty_like(y);
  auto threshold = torch::empty({rows}, y.options());
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "topk_mask", [&] {
    using T = scalar_t;
    const T* yp = y.const_data_ptr<T>();
    T* op = out.mutable_data_ptr<T>();
    T* tp = threshold.mutable_data_ptr<T>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      std::vector<T> scratch(2 * n + 16), finite(n);
      for (int64_t i = begin; i < end; ++i) {
        const T* row = yp + i * n;
        T t = 0, unused = 0;
        if (!select_pair(row, n, n - k, false, scratch.data(), t, unused)) {
          // NaN in the row: NaNs are the largest; select among the others if k exceeds them
          int64_t m = 0;
          for (int64_t j = 0; j < n; ++j) {
            if (!is_nan(row[j])) finite[m++] = row[j];
          }
          const int64_t nans = n - m;
          t = std::numeric_limits<T>::quiet_NaN();
          if (nans < k) select_pair(finite.data(), m, m - (k - nans), false, scratch.data(), t, unused);
        }
        tp[i] = t;
        mask_row(row, row, op + i * n, n, t, k);
      }
    });
  });
  return {out, threshold};
}

// Top-K's backward: the gradient where the forward kept the entry (recomputed from the
// input and the thresholds), zero elsewhere.
torch::Tensor topk_mask_backward(const torch::Tensor& grad_in, const torch::Tensor& y,
                                 const torch::Tensor& threshold, int64_t k) {
  const torch::Tensor grad = grad_in.contiguous();
  actlab::check_dense_float(y, "topk_mask_backward");
  const int64_t n = y.size(-1);
  const int64_t rows = y.numel() / n;
  auto out = torch::empty_like(grad);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "topk_mask_backward", [&] {
    using T = scalar_t;
    const T* yp = y.const_data_ptr<T>();
    const T* gp = grad.const_data_ptr<T>();
    const T* tp = threshold.const_data_ptr<T>();
    T* op = out.mutable_data_ptr<T>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // the drop mask is a function of the row and its threshold: mask the gradient alike
        mask_row(yp + i * n, gp + i * n, op + i * n, n, tp[i], k);
      }
    });
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("percentile_norm_forward", &percentile_norm_forward,
        "Percentile Centering forward (y, center, var, mean, rstd, below_idx, above_idx)");
  m.def("percentile_norm_backward", &percentile_norm_backward,
        "Percentile Centering backward (grad_x, grad_weight, grad_bias)");
  m.def("topk_mask", &topk_mask, "Top-K along the last dim by selection (out, threshold)");
  m.def("topk_mask_backward", &topk_mask_backward, "Top-K's gradient (zero where dropped)");
}
