// Forward and backward of a stack of pre-norm residual MLP blocks, x <- x + W2 (f(W1 LN(x)) - b),
// for an ensemble of S independent members, one member per task.
//
// Why: a vmapped ensemble runs every op over all members at once, so each intermediate of
// shape (S, B, m) leaves the caches between ops and comes back from memory. Here each member
// goes through all of its blocks while its (B, m) intermediates stay in L2, the matrix
// products are single-threaded BLAS calls on those cached blocks, and the two threads take
// different members. Saved for backward: each block's input and pre-activation; the
// activation, the LayerNorm output and the derivatives are recomputed in backward.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "activation_functors.h"

// The BLAS that torch links (MKL in the x86 wheels) exports the Fortran symbols; weak, so
// the module still loads where it does not, and has_blas() says so.
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*,
            const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*,
            const double*, const int*, const double*, const int*, const double*, double*,
            const int*) __attribute__((weak));
int MKL_Set_Num_Threads_Local(int) __attribute__((weak));
}

namespace {

using at::vec::Vectorized;
using Tensor = torch::Tensor;

// Inside our parallel region each BLAS call must stay on its own thread; MKL would
// otherwise start nested threads of its own. Restores the previous setting on exit.
struct SingleThreadedBlas {
  int previous = 0;
  SingleThreadedBlas() {
    if (MKL_Set_Num_Threads_Local != nullptr) previous = MKL_Set_Num_Threads_Local(1);
  }
  ~SingleThreadedBlas() {
    if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(previous);
  }
};

// Row-major C[M,N] = alpha op(A) op(B) + beta C, as the column-major C^T = op(B)^T op(A)^T.
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
  } else {
    dgemm_(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
  }
}

// out = f(h) - shift over n elements.
template <typename T, typename A>
void apply_act(const A& act, const T* h, T shift, T* out, int64_t n) {
  using V = Vectorized<T>;
  const V vb(shift);
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) (act.f(V::loadu(h + i)) - vb).store(out + i);
  for (; i < n; ++i) out[i] = act.f_tail(h[i]) - shift;
}

// g *= f'(h) over n elements.
template <typename T, typename A>
void scale_by_derivative(const A& act, const T* h, T* g, int64_t n) {
  using V = Vectorized<T>;
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) (V::loadu(g + i) * act.df(V::loadu(h + i))).store(g + i);
  for (; i < n; ++i) g[i] *= act.df_tail(h[i]);
}

// Row statistics (two passes, biased variance, as LayerNorm) and the normalised rows:
// xhat = (x - mean) * rstd and u = xhat * w + b. mean/rstd are written when `stats` is true,
// read otherwise.
template <typename T>
void layer_norm_rows(const T* x, int64_t rows, int64_t d, const T* w, const T* b, T eps,
                     bool stats, T* mean, T* rstd, T* xhat, T* u) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    if (stats) {
      T sum = 0;
      for (int64_t j = 0; j < d; ++j) sum += xr[j];
      const T mu = sum / T(d);
      T sq = 0;
      for (int64_t j = 0; j < d; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
      mean[r] = mu;
      rstd[r] = T(1) / std::sqrt(sq / T(d) + eps);
    }
    const T mu = mean[r], rs = rstd[r];
    for (int64_t j = 0; j < d; ++j) {
      const T v = (xr[j] - mu) * rs;
      xhat[r * d + j] = v;
      u[r * d + j] = v * w[j] + b[j];
    }
  }
}

struct Shapes {
  int64_t L, S, B, d, m;
};

Shapes check_inputs(const Tensor& x, const std::vector<Tensor>& ln_w,
                    const std::vector<Tensor>& ln_b, const std::vector<Tensor>& w_up,
                    const std::vector<Tensor>& w_down, const Tensor& shift) {
  actlab::check_dense_float(x, "x");
  TORCH_CHECK(x.dim() == 3, "x: expected (members, batch, d), got ", x.sizes());
  Shapes s{static_cast<int64_t>(w_up.size()), x.size(0), x.size(1), x.size(2), 0};
  TORCH_CHECK(s.L > 0 && ln_w.size() == w_up.size() && ln_b.size() == w_up.size() &&
                  w_down.size() == w_up.size(),
              "need the same positive number of LayerNorm weights, biases, up and down weights");
  s.m = w_up[0].size(1);
  for (int64_t l = 0; l < s.L; ++l) {
    for (const Tensor* t : {&ln_w[l], &ln_b[l], &w_up[l], &w_down[l]}) {
      actlab::check_dense_float(*t, "parameter");
      TORCH_CHECK(t->scalar_type() == x.scalar_type(), "parameters and x must share a dtype");
    }
    TORCH_CHECK(ln_w[l].sizes() == at::IntArrayRef({s.S, s.d}) &&
                    ln_b[l].sizes() == at::IntArrayRef({s.S, s.d}),
                "LayerNorm parameters: expected (members, d)");
    TORCH_CHECK(w_up[l].sizes() == at::IntArrayRef({s.S, s.m, s.d}), "up weight: expected (members, m, d)");
    TORCH_CHECK(w_down[l].sizes() == at::IntArrayRef({s.S, s.d, s.m}), "down weight: expected (members, d, m)");
  }
  TORCH_CHECK(shift.sizes() == at::IntArrayRef({s.L, s.S}) && shift.scalar_type() == x.scalar_type() &&
                  shift.is_contiguous(),
              "shift: expected a contiguous (blocks, members) tensor of x's dtype");
  return s;
}

}  // namespace

bool has_blas() { return sgemm_ != nullptr && dgemm_ != nullptr; }

// Returns y, the block inputs xs (L, S, B, d), pre-activations hs (L, S, B, m), and the
// LayerNorm row statistics mean, rstd (L, S, B).
std::vector<Tensor> stack_forward(const Tensor& x, const std::vector<Tensor>& ln_w,
                                  const std::vector<Tensor>& ln_b, const std::vector<Tensor>& w_up,
                                  const std::vector<Tensor>& w_down, const Tensor& shift,
                                  int64_t kind, double eps) {
  TORCH_CHECK(has_blas(), "stack_forward: no BLAS symbols in this torch build");
  const Shapes s = check_inputs(x, ln_w, ln_b, w_up, w_down, shift);
  const auto opts = x.options();
  Tensor xs = torch::empty({s.L, s.S, s.B, s.d}, opts);
  Tensor hs = torch::empty({s.L, s.S, s.B, s.m}, opts);
  Tensor mean = torch::empty({s.L, s.S, s.B}, opts);
  Tensor rstd = torch::empty({s.L, s.S, s.B}, opts);
  Tensor y = torch::empty({s.S, s.B, s.d}, opts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "stack_forward", [&] {
    using T = scalar_t;
    actlab::with_act(kind, T(0), [&](auto act) {
      at::parallel_for(0, s.S, 1, [&](int64_t begin, int64_t end) {
        const int64_t Bd = s.B * s.d, Bm = s.B * s.m;
        const SingleThreadedBlas single;
        std::vector<T> xhat(Bd), u(Bd), a(Bm);
        for (int64_t k = begin; k < end; ++k) {
          std::copy_n(x.const_data_ptr<T>() + k * Bd, Bd, xs.mutable_data_ptr<T>() + k * Bd);
          for (int64_t l = 0; l < s.L; ++l) {
            const int64_t lk = l * s.S + k;
            const T* xin = xs.const_data_ptr<T>() + lk * Bd;
            T* h = hs.mutable_data_ptr<T>() + lk * Bm;
            layer_norm_rows<T>(xin, s.B, s.d, ln_w[l].const_data_ptr<T>() + k * s.d,
                               ln_b[l].const_data_ptr<T>() + k * s.d, T(eps), true,
                               mean.mutable_data_ptr<T>() + lk * s.B,
                               rstd.mutable_data_ptr<T>() + lk * s.B, xhat.data(), u.data());
            // h = u @ W1^T
            gemm<T>(false, true, s.B, s.m, s.d, T(1), u.data(), s.d,
                    w_up[l].const_data_ptr<T>() + k * s.m * s.d, s.d, T(0), h, s.m);
            apply_act(act, h, shift.const_data_ptr<T>()[lk], a.data(), Bm);
            // x_next = x + a @ W2^T
            T* xout = l + 1 < s.L ? xs.mutable_data_ptr<T>() + ((l + 1) * s.S + k) * Bd
                                  : y.mutable_data_ptr<T>() + k * Bd;
            std::copy_n(xin, Bd, xout);
            gemm<T>(false, true, s.B, s.d, s.m, T(1), a.data(), s.m,
                    w_down[l].const_data_ptr<T>() + k * s.d * s.m, s.m, T(1), xout, s.d);
          }
        }
      });
    });
  });
  return {y, xs, hs, mean, rstd};
}

// Returns the gradients of x, then stacked (L, S, ...) gradients of the LayerNorm weights,
// LayerNorm biases, up weights and down weights.
std::vector<Tensor> stack_backward(const Tensor& grad_y, const Tensor& xs, const Tensor& hs,
                                   const Tensor& mean, const Tensor& rstd,
                                   const std::vector<Tensor>& ln_w, const std::vector<Tensor>& ln_b,
                                   const std::vector<Tensor>& w_up,
                                   const std::vector<Tensor>& w_down, const Tensor& shift,
                                   int64_t kind) {
  TORCH_CHECK(has_blas(), "stack_backward: no BLAS symbols in this torch build");
  const Tensor gy = grad_y.contiguous();
  const Shapes s = check_inputs(gy, ln_w, ln_b, w_up, w_down, shift);
  const auto opts = gy.options();
  Tensor gx = torch::empty({s.S, s.B, s.d}, opts);
  Tensor g_ln_w = torch::empty({s.L, s.S, s.d}, opts);
  Tensor g_ln_b = torch::empty({s.L, s.S, s.d}, opts);
  Tensor g_up = torch::empty({s.L, s.S, s.m, s.d}, opts);
  Tensor g_down = torch::empty({s.L, s.S, s.d, s.m}, opts);
  AT_DISPATCH_FLOATING_TYPES(gy.scalar_type(), "stack_backward", [&] {
    using T = scalar_t;
    actlab::with_act(kind, T(0), [&](auto act) {
      at::parallel_for(0, s.S, 1, [&](int64_t begin, int64_t end) {
        const int64_t Bd = s.B * s.d, Bm = s.B * s.m, d = s.d;
        const SingleThreadedBlas single;
        std::vector<T> dy(Bd), xhat(Bd), u(Bd), du(Bd), a(Bm), dh(Bm);
        for (int64_t k = begin; k < end; ++k) {
          std::copy_n(gy.const_data_ptr<T>() + k * Bd, Bd, dy.data());
          for (int64_t l = s.L - 1; l >= 0; --l) {
            const int64_t lk = l * s.S + k;
            const T* h = hs.const_data_ptr<T>() + lk * Bm;
            const T* w1 = w_up[l].const_data_ptr<T>() + k * s.m * d;
            const T* w2 = w_down[l].const_data_ptr<T>() + k * d * s.m;
            const T* lw = ln_w[l].const_data_ptr<T>() + k * d;
            apply_act(act, h, shift.const_data_ptr<T>()[lk], a.data(), Bm);
            // dW2 = dy^T @ a ; da = dy @ W2 ; dh = da * f'(h)
            gemm<T>(true, false, d, s.m, s.B, T(1), dy.data(), d, a.data(), s.m, T(0),
                    g_down.mutable_data_ptr<T>() + lk * d * s.m, s.m);
            gemm<T>(false, false, s.B, s.m, d, T(1), dy.data(), d, w2, s.m, T(0), dh.data(), s.m);
            scale_by_derivative(act, h, dh.data(), Bm);
            T* mu = const_cast<T*>(mean.const_data_ptr<T>() + lk * s.B);
            T* rs = const_cast<T*>(rstd.const_data_ptr<T>() + lk * s.B);
            layer_norm_rows<T>(xs.const_data_ptr<T>() + lk * Bd, s.B, d, lw,
                               ln_b[l].const_data_ptr<T>() + k * d, T(0), false, mu, rs,
                               xhat.data(), u.data());
            // dW1 = dh^T @ u ; du = dh @ W1
            gemm<T>(true, false, s.m, d, s.B, T(1), dh.data(), s.m, u.data(), d, T(0),
                    g_up.mutable_data_ptr<T>() + lk * s.m * d, d);
            gemm<T>(false, false, s.B, d, s.m, T(1), dh.data(), s.m, w1, d, T(0), du.data(), d);
            // LayerNorm: parameter gradients, then the input gradient added to dy.
            T* gw = g_ln_w.mutable_data_ptr<T>() + lk * d;
            T* gb = g_ln_b.mutable_data_ptr<T>() + lk * d;
            std::fill_n(gw, d, T(0));
            std::fill_n(gb, d, T(0));
            for (int64_t r = 0; r < s.B; ++r) {
              const T* dur = du.data() + r * d;
              const T* xr = xhat.data() + r * d;
              T mean_g = 0, mean_gx = 0;
              for (int64_t j = 0; j < d; ++j) {
                gw[j] += dur[j] * xr[j];
                gb[j] += dur[j];
                const T g = dur[j] * lw[j];
                mean_g += g;
                mean_gx += g * xr[j];
              }
              mean_g /= T(d);
              mean_gx /= T(d);
              T* dyr = dy.data() + r * d;
              for (int64_t j = 0; j < d; ++j) {
                dyr[j] += rs[r] * (dur[j] * lw[j] - mean_g - xr[j] * mean_gx);
              }
            }
          }
          std::copy_n(dy.data(), Bd, gx.mutable_data_ptr<T>() + k * Bd);
        }
      });
    });
  });
  return {gx, g_ln_w, g_ln_b, g_up, g_down};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("has_blas", &has_blas, "whether the BLAS symbols were found");
  m.def("stack_forward", &stack_forward, "pre-norm residual MLP stack, forward, per member");
  m.def("stack_backward", &stack_backward, "pre-norm residual MLP stack, backward, per member");
}
