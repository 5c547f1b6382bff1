// One-pass CPU kernels for "activation minus a constant" and "activation centred over the
// last dimension", the centred backward, and Top-K by a Gaussian cutoff of each row. Eager
// ATen needs an extra pass over memory for each of these (f(x), then the subtraction, the
// mean or the row statistics); these do it while the data is in registers (shift) or in L1
// (one row at a time, centring and the Gaussian cutoff).
//
// Activation kinds: see kind_table() in activation_functors.h (this file uses relu,
// leaky_relu, gelu and silu).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include "activation_functors.h"

namespace {

using at::vec::Vectorized;
using actlab::lanes_sum;
using actlab::with_act;

// Sum of f(x) over a row while writing it, vectorised.
template <typename T, typename A>
T row_apply(const A& act, const T* x, T* y, int64_t n) {
  using V = Vectorized<T>;
  V acc(T(0));
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size()) {
    const V v = act.f(V::loadu(x + j));
    v.store(y + j);
    acc = acc + v;
  }
  T sum = lanes_sum(acc);
  for (; j < n; ++j) {
    y[j] = act.f_tail(x[j]);
    sum += y[j];
  }
  return sum;
}

}  // namespace

torch::Tensor shift_forward(const torch::Tensor& x, int64_t kind, double param, double shift) {
  actlab::check_dense_float(x, "shift_forward");
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "shift_forward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    const scalar_t b = static_cast<scalar_t>(shift);
    with_act(kind, static_cast<scalar_t>(param), [&](auto act) {
      at::parallel_for(0, x.numel(), 32768, [&](int64_t begin, int64_t end) {
        const V vb(b);
        int64_t i = begin;
        for (; i + V::size() <= end; i += V::size()) {
          (act.f(V::loadu(xp + i)) - vb).store(yp + i);
        }
        for (; i < end; ++i) yp[i] = act.f_tail(xp[i]) - b;
      });
    });
  });
  return y;
}

torch::Tensor center_forward(const torch::Tensor& x, int64_t kind, double param) {
  actlab::check_dense_float(x, "center_forward");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "center_forward: need a non-empty last dimension");
  auto y = torch::empty_like(x);
  const int64_t n = x.size(-1), rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "center_forward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    with_act(kind, static_cast<scalar_t>(param), [&](auto act) {
      at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          scalar_t* yr = yp + r * n;
          const scalar_t mean_s = row_apply(act, xp + r * n, yr, n) / static_cast<scalar_t>(n);
          const V mean(mean_s);
          int64_t j = 0;
          for (; j + V::size() <= n; j += V::size()) (V::loadu(yr + j) - mean).store(yr + j);
          for (; j < n; ++j) yr[j] -= mean_s;
        }
      });
    });
  });
  return y;
}

torch::Tensor center_backward(const torch::Tensor& grad, const torch::Tensor& x, int64_t kind,
                              double param) {
  actlab::check_dense_float(grad, "center_backward");
  actlab::check_dense_float(x, "center_backward");
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.scalar_type() == x.scalar_type(),
              "center_backward: grad and x must have the same shape and dtype");
  auto out = torch::empty_like(x);
  const int64_t n = x.size(-1), rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "center_backward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* gp = grad.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* op = out.mutable_data_ptr<scalar_t>();
    with_act(kind, static_cast<scalar_t>(param), [&](auto act) {
      at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const scalar_t* gr = gp + r * n;
          const scalar_t* xr = xp + r * n;
          scalar_t* orow = op + r * n;
          V acc(scalar_t(0));
          int64_t j = 0;
          for (; j + V::size() <= n; j += V::size()) acc = acc + V::loadu(gr + j);
          scalar_t sum = lanes_sum(acc);
          for (; j < n; ++j) sum += gr[j];
          const scalar_t mean_s = sum / static_cast<scalar_t>(n);
          const V mean(mean_s);
          for (j = 0; j + V::size() <= n; j += V::size()) {
            (act.df(V::loadu(xr + j)) * (V::loadu(gr + j) - mean)).store(orow + j);
          }
          for (; j < n; ++j) orow[j] = act.df_tail(xr[j]) * (gr[j] - mean_s);
        }
      });
    });
  });
  return out;
}

// Top-K by a Gaussian cutoff (`topk=K:gaussian`).
// f(x) kept above its row's mean + z * std (biased), one row at a time in cache; returns the
// output and the cutoff of every row.
std::vector<torch::Tensor> gaussian_forward(const torch::Tensor& x, int64_t kind, double param,
                                            double z) {
  actlab::check_dense_float(x, "gaussian_forward");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "gaussian_forward: need a non-empty last dimension");
  const int64_t n = x.size(-1), rows = x.numel() / n;
  auto y = torch::empty_like(x);
  auto cutoff = torch::empty({rows}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gaussian_forward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    scalar_t* cp = cutoff.mutable_data_ptr<scalar_t>();
    with_act(kind, static_cast<scalar_t>(param), [&](auto act) {
      at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
        const V zero(scalar_t(0));
        for (int64_t r = begin; r < end; ++r) {
          scalar_t* yr = yp + r * n;
          const scalar_t mean_s = row_apply(act, xp + r * n, yr, n) / static_cast<scalar_t>(n);
          const V mean(mean_s);
          V acc(scalar_t(0));
          int64_t j = 0;
          for (; j + V::size() <= n; j += V::size()) {
            const V d = V::loadu(yr + j) - mean;
            acc = acc + d * d;
          }
          scalar_t sq = lanes_sum(acc);
          for (; j < n; ++j) sq += (yr[j] - mean_s) * (yr[j] - mean_s);
          const scalar_t cut = mean_s + static_cast<scalar_t>(z) *
                               std::sqrt(sq / static_cast<scalar_t>(n));
          cp[r] = cut;
          const V vc(cut);
          for (j = 0; j + V::size() <= n; j += V::size()) {
            const V v = V::loadu(yr + j);
            V::blendv(zero, v, v > vc).store(yr + j);
          }
          for (; j < n; ++j) yr[j] = yr[j] > cut ? yr[j] : scalar_t(0);
        }
      });
    });
  });
  return {y, cutoff};
}

// Its gradient: grad * f'(x) where kept (`cutoff`: one value, or one per row). In rows whose cutoff is >= 0 the kept
// entries are exactly those with out > 0; elsewhere f(x) > cutoff is recomputed.
torch::Tensor mask_backward(const torch::Tensor& grad, const torch::Tensor& x,
                            const torch::Tensor& out, int64_t kind, double param,
                            const torch::Tensor& cutoff) {
  actlab::check_dense_float(grad, "mask_backward");
  actlab::check_dense_float(x, "mask_backward");
  actlab::check_dense_float(out, "mask_backward");
  TORCH_CHECK(grad.sizes() == x.sizes() && out.sizes() == x.sizes(),
              "mask_backward: grad, x and out must have the same shape");
  auto c = cutoff.to(x.scalar_type()).contiguous();
  const int64_t n = x.size(-1), rows = x.numel() / n;
  TORCH_CHECK(c.numel() == 1 || c.numel() == rows, "mask_backward: cutoff must have 1 or rows values");
  auto result = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mask_backward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* gp = grad.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* op = out.const_data_ptr<scalar_t>();
    const scalar_t* cp = c.const_data_ptr<scalar_t>();
    scalar_t* rp = result.mutable_data_ptr<scalar_t>();
    const bool per_row = c.numel() > 1;
    with_act(kind, static_cast<scalar_t>(param), [&](auto act) {
      at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
        const V zero(scalar_t(0));
        for (int64_t r = begin; r < end; ++r) {
          const scalar_t cut = per_row ? cp[r] : cp[0];
          const V vc(cut);
          const int64_t o = r * n;
          int64_t j = 0;
          if (cut >= scalar_t(0)) {
            for (; j + V::size() <= n; j += V::size()) {
              const V x_ = V::loadu(xp + o + j);
              const V g = V::loadu(gp + o + j) * act.df(x_);
              V::blendv(zero, g, V::loadu(op + o + j) > zero).store(rp + o + j);
            }
            for (; j < n; ++j) {
              rp[o + j] = op[o + j] > scalar_t(0) ? gp[o + j] * act.df_tail(xp[o + j]) : scalar_t(0);
            }
          } else {
            for (; j + V::size() <= n; j += V::size()) {
              const V x_ = V::loadu(xp + o + j);
              const V g = V::loadu(gp + o + j) * act.df(x_);
              V::blendv(zero, g, act.f(x_) > vc).store(rp + o + j);
            }
            for (; j < n; ++j) {
              const scalar_t x_ = xp[o + j];
              rp[o + j] = act.f_tail(x_) > cut ? gp[o + j] * act.df_tail(x_) : scalar_t(0);
            }
          }
        }
      });
    });
  });
  return result;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("kinds", &actlab::kind_table, "the activation kinds by name");
  m.def("shift_forward", &shift_forward, "f(x) - shift in one pass");
  m.def("center_forward", &center_forward, "f(x) minus its mean over the last dimension");
  m.def("center_backward", &center_backward, "f'(x) * (grad - mean over the last dimension)");
  m.def("gaussian_forward", &gaussian_forward, "f(x) above its row's mean + z std; the cutoffs");
  m.def("mask_backward", &mask_backward, "grad * f'(x) where kept by gaussian_forward");
}
