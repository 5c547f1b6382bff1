// Forward and backward of a stack of pre-norm residual MLP blocks, x <- x + W2 (f(W1 LN(x)) - b),
// for an ensemble of S independent members, one member per task.
//
// Why: a vmapped ensemble runs every op over all members at once, so each intermediate of
// shape (S, B, m) leaves the caches between ops and comes back from memory. Here each member
// goes through all of its blocks while its (B, m) intermediates stay in L2, the matrix
// products are single-threaded BLAS calls on those cached blocks, and the two threads take
// different members. Saved for backward: each block's input and LayerNorm statistics; the
// LayerNorm output, the pre-activation (one more small matrix product) and the activation
// are recomputed in backward, which here is faster than writing the pre-activations to
// memory and reading them back, and saves that memory.
//
// Inside, activations are kept transposed, (features, batch): LayerNorm's per-row
// statistics become vector operations along the batch, and every matrix product has the
// batch (not d = 20, say) as its contiguous output dimension, which BLAS runs faster.
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

// LayerNorm statistics of the columns of X (d, B), i.e. over the features of each example:
// mean and rstd (B), two passes with the biased variance, as nn.LayerNorm.
template <typename T>
void column_stats(const T* X, int64_t d, int64_t B, T eps, T* mean, T* rstd) {
  std::fill_n(mean, B, T(0));
  std::fill_n(rstd, B, T(0));
  for (int64_t j = 0; j < d; ++j) {
    const T* xj = X + j * B;
#pragma omp simd
    for (int64_t r = 0; r < B; ++r) mean[r] += xj[r];
  }
#pragma omp simd
  for (int64_t r = 0; r < B; ++r) mean[r] /= T(d);
  for (int64_t j = 0; j < d; ++j) {  // second pass: the variance of centred values
    const T* xj = X + j * B;
#pragma omp simd
    for (int64_t r = 0; r < B; ++r) rstd[r] += (xj[r] - mean[r]) * (xj[r] - mean[r]);
  }
#pragma omp simd
  for (int64_t r = 0; r < B; ++r) rstd[r] = T(1) / std::sqrt(rstd[r] / T(d) + eps);
}

// XH = (X - mean) * rstd and U = XH * w + b, all (d, B), from given column statistics.
template <typename T>
void normalise_columns(const T* X, int64_t d, int64_t B, const T* w, const T* b,
                       const T* mean, const T* rstd, T* XH, T* U) {
  for (int64_t j = 0; j < d; ++j) {
    const T* xj = X + j * B;
    T* xhj = XH + j * B;
    T* uj = U + j * B;
    const T wj = w[j], bj = b[j];
#pragma omp simd
    for (int64_t r = 0; r < B; ++r) {
      const T v = (xj[r] - mean[r]) * rstd[r];
      xhj[r] = v;
      uj[r] = v * wj + bj;
    }
  }
}

// LayerNorm backward for one block: adds the parameter gradients' column sums into gw, gb
// (d) and the input gradient into DY (d, B), given DU = dLoss/dU (d, B). mg, mgx: scratch (B).
template <typename T>
void layer_norm_columns_backward(const T* DU, const T* XH, const T* w, const T* rstd, int64_t d,
                                 int64_t B, T* gw, T* gb, T* DY, T* mg, T* mgx) {
  std::fill_n(mg, B, T(0));
  std::fill_n(mgx, B, T(0));
  for (int64_t j = 0; j < d; ++j) {
    const T* duj = DU + j * B;
    const T* xhj = XH + j * B;
    const T wj = w[j];
    T sum_gx = 0, sum_g = 0;
#pragma omp simd reduction(+ : sum_gx, sum_g)
    for (int64_t r = 0; r < B; ++r) {
      sum_gx += duj[r] * xhj[r];
      sum_g += duj[r];
      mg[r] += duj[r] * wj;
      mgx[r] += duj[r] * wj * xhj[r];
    }
    gw[j] = sum_gx;
    gb[j] = sum_g;
  }
  const T inv_d = T(1) / T(d);
  for (int64_t j = 0; j < d; ++j) {
    const T* duj = DU + j * B;
    const T* xhj = XH + j * B;
    T* dyj = DY + j * B;
    const T wj = w[j];
#pragma omp simd
    for (int64_t r = 0; r < B; ++r) {
      dyj[r] += rstd[r] * (duj[r] * wj - mg[r] * inv_d - xhj[r] * mgx[r] * inv_d);
    }
  }
}

// out (cols, rows) = in (rows, cols) transposed.
template <typename T>
void transpose(const T* in, int64_t rows, int64_t cols, T* out) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
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

// Calls body(act, T(), begin, end) on the intra-op threads for chunks of members, with the
// activation and scalar type resolved and BLAS kept single-threaded inside.
template <typename Body>
void over_members(at::ScalarType dtype, int64_t kind, int64_t members, Body&& body) {
  AT_DISPATCH_FLOATING_TYPES(dtype, "residual_stack", [&] {
    actlab::with_act(kind, scalar_t(0), [&](auto act) {
      at::parallel_for(0, members, 1, [&](int64_t begin, int64_t end) {
        const SingleThreadedBlas single;
        body(act, scalar_t(0), begin, end);
      });
    });
  });
}

}  // namespace

bool has_blas() { return sgemm_ != nullptr && dgemm_ != nullptr; }

// Returns y, the block inputs xs (L, S, d, B), transposed, and the LayerNorm statistics
// mean, rstd (L, S, B).
std::vector<Tensor> stack_forward(const Tensor& x, const std::vector<Tensor>& ln_w,
                                  const std::vector<Tensor>& ln_b, const std::vector<Tensor>& w_up,
                                  const std::vector<Tensor>& w_down, const Tensor& shift,
                                  int64_t kind, double eps) {
  TORCH_CHECK(has_blas(), "stack_forward: no BLAS symbols in this torch build");
  const Shapes s = check_inputs(x, ln_w, ln_b, w_up, w_down, shift);
  const auto opts = x.options();
  Tensor xs = torch::empty({s.L, s.S, s.d, s.B}, opts);
  Tensor mean = torch::empty({s.L, s.S, s.B}, opts);
  Tensor rstd = torch::empty({s.L, s.S, s.B}, opts);
  Tensor y = torch::empty({s.S, s.B, s.d}, opts);
  over_members(x.scalar_type(), kind, s.S, [&](const auto& act, auto zero, int64_t begin,
                                               int64_t end) {
    using T = decltype(zero);
    const int64_t B = s.B, d = s.d, m = s.m, Bd = B * d, Bm = B * m;
    std::vector<T> xh(Bd), u(Bd), h(Bm), a(Bm), last(Bd);
    for (int64_t k = begin; k < end; ++k) {
      transpose(x.const_data_ptr<T>() + k * Bd, B, d, xs.mutable_data_ptr<T>() + k * Bd);
      for (int64_t l = 0; l < s.L; ++l) {
        const int64_t lk = l * s.S + k;
        const T* X = xs.const_data_ptr<T>() + lk * Bd;
        T* H = h.data();
        T* mu = mean.mutable_data_ptr<T>() + lk * B;
        T* rs = rstd.mutable_data_ptr<T>() + lk * B;
        column_stats<T>(X, d, B, T(eps), mu, rs);
        normalise_columns<T>(X, d, B, ln_w[l].const_data_ptr<T>() + k * d,
                             ln_b[l].const_data_ptr<T>() + k * d, mu, rs, xh.data(), u.data());
        // H = W1 U
        gemm<T>(false, false, m, B, d, T(1), w_up[l].const_data_ptr<T>() + k * m * d, d,
                u.data(), B, T(0), H, B);
        apply_act(act, H, shift.const_data_ptr<T>()[lk], a.data(), Bm);
        // X_next = X + W2 A
        T* next = l + 1 < s.L ? xs.mutable_data_ptr<T>() + ((l + 1) * s.S + k) * Bd : last.data();
        std::copy_n(X, Bd, next);
        gemm<T>(false, false, d, B, m, T(1), w_down[l].const_data_ptr<T>() + k * d * m, m,
                a.data(), B, T(1), next, B);
      }
      transpose(last.data(), d, B, y.mutable_data_ptr<T>() + k * Bd);
    }
  });
  return {y, xs, mean, rstd};
}

// Returns the gradients of x, then stacked (L, S, ...) gradients of the LayerNorm weights,
// LayerNorm biases, up weights and down weights.
std::vector<Tensor> stack_backward(const Tensor& grad_y, const Tensor& xs,
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
  over_members(gy.scalar_type(), kind, s.S, [&](const auto& act, auto zero, int64_t begin,
                                                int64_t end) {
    using T = decltype(zero);
    const int64_t B = s.B, d = s.d, m = s.m, Bd = B * d, Bm = B * m;
    std::vector<T> dy(Bd), xh(Bd), u(Bd), du(Bd), h(Bm), a(Bm), dh(Bm), gw1t(d * m), mg(B),
        mgx(B);
    for (int64_t k = begin; k < end; ++k) {
      transpose(gy.const_data_ptr<T>() + k * Bd, B, d, dy.data());
      for (int64_t l = s.L - 1; l >= 0; --l) {
        const int64_t lk = l * s.S + k;
        const T* w1 = w_up[l].const_data_ptr<T>() + k * m * d;
        const T* w2 = w_down[l].const_data_ptr<T>() + k * d * m;
        const T* lw = ln_w[l].const_data_ptr<T>() + k * d;
        const T* rs = rstd.const_data_ptr<T>() + lk * B;
        normalise_columns<T>(xs.const_data_ptr<T>() + lk * Bd, d, B, lw,
                             ln_b[l].const_data_ptr<T>() + k * d,
                             mean.const_data_ptr<T>() + lk * B, rs, xh.data(), u.data());
        // H = W1 U again
        gemm<T>(false, false, m, B, d, T(1), w1, d, u.data(), B, T(0), h.data(), B);
        const T* H = h.data();
        apply_act(act, H, shift.const_data_ptr<T>()[lk], a.data(), Bm);
        // dW2 = DY A^T ; DH = W2^T DY * f'(H)
        gemm<T>(false, true, d, m, B, T(1), dy.data(), B, a.data(), B, T(0),
                g_down.mutable_data_ptr<T>() + lk * d * m, m);
        gemm<T>(true, false, m, B, d, T(1), w2, m, dy.data(), B, T(0), dh.data(), B);
        scale_by_derivative(act, H, dh.data(), Bm);
        // dW1 = (U DH^T)^T (the batch stays the contiguous dimension) ; DU = W1^T DH
        gemm<T>(false, true, d, m, B, T(1), u.data(), B, dh.data(), B, T(0), gw1t.data(), m);
        transpose(gw1t.data(), d, m, g_up.mutable_data_ptr<T>() + lk * m * d);
        gemm<T>(true, false, d, B, m, T(1), w1, d, dh.data(), B, T(0), du.data(), B);
        layer_norm_columns_backward<T>(du.data(), xh.data(), lw, rs, d, B,
                                       g_ln_w.mutable_data_ptr<T>() + lk * d,
                                       g_ln_b.mutable_data_ptr<T>() + lk * d, dy.data(),
                                       mg.data(), mgx.data());
      }
      transpose(dy.data(), d, B, gx.mutable_data_ptr<T>() + k * Bd);
    }
  });
  return {gx, g_ln_w, g_ln_b, g_up, g_down};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("kinds", &actlab::kind_table, "the activation kinds by name");
  m.def("has_blas", &has_blas, "whether the BLAS symbols were found");
  m.def("stack_forward", &stack_forward, "pre-norm residual MLP stack, forward, per member");
  m.def("stack_backward", &stack_backward, "pre-norm residual MLP stack, backward, per member");
}
