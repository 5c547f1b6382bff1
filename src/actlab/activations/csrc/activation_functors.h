// Vectorised activation functors shared by actlab's C++ kernels: the activation and its
// derivative as compile-time constants, so every loop is specialised to one function.
//
// kind: see kind_table() (leaky_relu's parameter `slope` is the negative slope). Every
// extension exports that table as `kinds()`, and the Python side checks its copy on load.
#pragma once

#include <torch/extension.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace actlab {

using at::vec::Vectorized;

// The activation kinds by name: the one table of kernel numbers.
inline std::map<std::string, int64_t> kind_table() {
  return {{"relu", 0}, {"leaky_relu", 1}, {"gelu", 2}, {"silu", 3}, {"sigmoid", 4}, {"tanh", 5}};
}

template <typename T, int Kind>
struct Act {
  T slope;

  Vectorized<T> f(const Vectorized<T>& x) const {
    using V = Vectorized<T>;
    const V zero(T(0)), one(T(1)), half(T(0.5));
    if constexpr (Kind == 0) return at::vec::clamp_min(x, zero);
    if constexpr (Kind == 1) return V::blendv(x * V(slope), x, x > zero);
    if constexpr (Kind == 2) return x * half * (one + (x * V(T(M_SQRT1_2))).erf());
    if constexpr (Kind == 3) return x / (one + x.neg().exp());
    if constexpr (Kind == 4) return one / (one + x.neg().exp());
    if constexpr (Kind == 5) return x.tanh();
  }
  Vectorized<T> df(const Vectorized<T>& x) const {
    using V = Vectorized<T>;
    const V zero(T(0)), one(T(1)), half(T(0.5));
    if constexpr (Kind == 0) return V::blendv(zero, one, x > zero);
    if constexpr (Kind == 1) return V::blendv(V(slope), one, x > zero);
    if constexpr (Kind == 2) {
      const V cdf = half * (one + (x * V(T(M_SQRT1_2))).erf());
      const V pdf = (x * x * V(T(-0.5))).exp() * V(T(0.5 * M_2_SQRTPI * M_SQRT1_2));
      return cdf + x * pdf;
    }
    if constexpr (Kind == 3) {
      const V s = one / (one + x.neg().exp());
      return s * (one + x * (one - s));
    }
    if constexpr (Kind == 4) {
      const V s = one / (one + x.neg().exp());
      return s * (one - s);
    }
    if constexpr (Kind == 5) {
      const V t = x.tanh();
      return one - t * t;
    }
  }
  // Scalar versions for the tails, by way of a one-lane load (same arithmetic).
  T f_tail(T x) const {
    T buf[Vectorized<T>::size()] = {x};
    f(Vectorized<T>::loadu(buf, 1)).store(buf, 1);
    return buf[0];
  }
  T df_tail(T x) const {
    T buf[Vectorized<T>::size()] = {x};
    df(Vectorized<T>::loadu(buf, 1)).store(buf, 1);
    return buf[0];
  }
};

template <typename T>
T lanes_sum(const Vectorized<T>& v) {
  T buf[Vectorized<T>::size()];
  v.store(buf);
  T sum = 0;
  for (int k = 0; k < Vectorized<T>::size(); ++k) sum += buf[k];
  return sum;
}

// Calls fn(Act<T, K>{slope}) for the runtime kind K.
template <typename T, typename Fn>
void with_act(int64_t kind, T slope, Fn&& fn) {
  switch (kind) {
    case 0: fn(Act<T, 0>{slope}); break;
    case 1: fn(Act<T, 1>{slope}); break;
    case 2: fn(Act<T, 2>{slope}); break;
    case 3: fn(Act<T, 3>{slope}); break;
    case 4: fn(Act<T, 4>{slope}); break;
    case 5: fn(Act<T, 5>{slope}); break;
    default: TORCH_CHECK(false, "unknown activation kind ", kind);
  }
}

inline void check_dense_float(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, ": expected a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, name,
              ": expected float32 or float64");
}

}  // namespace actlab
