// The loops of the sparse decode kernels (sparse_decode.cpp), written once over a few vector
// operations and compiled once per instruction set. sparse_decode.cpp includes this file
// inside a namespace (avx512, avx2, portable) after defining there:
//   V, kWidth (floats per V), kDotRows (rows per dot-product group),
//   vzero(), vset1(float), vload(const float*), vload(const uint16_t*) (bfloat16 -> float),
//   vfma(a, b, c) = a * b + c, vstore(float*, V), vsum(V), sfma(a, b, c) (scalar).
// No include guard: it is included once per instruction set.

inline float scalar_load(const float* p) { return *p; }
inline float scalar_load(const uint16_t* p) { return actlab_sparse::bf16_to_float(*p); }

// y[t, c0:c1] += sum_r xc[t, j0 + r] * wt[idx[j0 + r], c0:c1] for r < R, every column's sum
// taken in row order (so the result does not depend on the column split between threads).
// The R weight vectors are loaded once per column step and shared by all T tokens.
template <int R, typename WT>
inline void axpy_rows(const float* xc, int64_t T, int64_t k, const int64_t* idx, int64_t j0,
                      const WT* wt, int64_t out, float* y, int64_t c0, int64_t c1) {
  const WT* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = wt + idx[j0 + r] * out;
  int64_t c = c0;
  if (T == 1) {  // the decode case: coefficients stay in registers
    V a[R];
    for (int r = 0; r < R; ++r) a[r] = vset1(xc[j0 + r]);
    for (; c + kWidth <= c1; c += kWidth) {
      V acc = vload(y + c);
      for (int r = 0; r < R; ++r) acc = vfma(a[r], vload(rows[r] + c), acc);
      vstore(y + c, acc);
    }
  } else {
    for (; c + kWidth <= c1; c += kWidth) {
      V w[R];
      for (int r = 0; r < R; ++r) w[r] = vload(rows[r] + c);
      for (int64_t t = 0; t < T; ++t) {
        const float* a = xc + t * k + j0;
        float* yt = y + t * out + c;
        V acc = vload(yt);
        for (int r = 0; r < R; ++r) acc = vfma(vset1(a[r]), w[r], acc);
        vstore(yt, acc);
      }
    }
  }
  for (; c < c1; ++c) {  // the last block's columns past a whole vector
    for (int64_t t = 0; t < T; ++t) {
      const float* a = xc + t * k + j0;
      float acc = y[t * out + c];
      for (int r = 0; r < R; ++r) acc = sfma(a[r], scalar_load(rows[r] + c), acc);
      y[t * out + c] = acc;
    }
  }
}

// Columns [c0, c1) of y (T, out) = bias + xc (T, k) @ wt[idx] (k rows of wt (in, out)).
template <typename WT>
void cols_block(const float* xc, int64_t T, int64_t k, const int64_t* idx, const WT* wt,
                int64_t out, const float* bias, float* y, int64_t c0, int64_t c1) {
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * out;
    for (int64_t c = c0; c < c1; ++c) yt[c] = bias != nullptr ? bias[c] : 0.0f;
  }
  // Eight rows per pass: one load and one store of the accumulators per eight weight
  // vectors, and eight independent streams for the hardware prefetcher.
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) axpy_rows<8>(xc, T, k, idx, j, wt, out, y, c0, c1);
  if (j + 4 <= k) {
    axpy_rows<4>(xc, T, k, idx, j, wt, out, y, c0, c1);
    j += 4;
  }
  for (; j < k; ++j) axpy_rows<1>(xc, T, k, idx, j, wt, out, y, c0, c1);
}

// y[t, j] for j in [j0, j0 + R) and t in [t0, t0 + TT): the dot products of rows idx[j] of
// w (out, in) with tokens x[t] (in); the R rows are read once per token group.
template <int R, int TT, typename WT>
inline void dot_rows(const float* x, int64_t in, const int64_t* idx, int64_t j0,
                     const WT* w, float* y, int64_t k, int64_t t0) {
  const WT* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w + idx[j0 + r] * in;
  V acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = vzero();
  int64_t c = 0;
  for (; c + kWidth <= in; c += kWidth) {
    V wv[R];
    for (int r = 0; r < R; ++r) wv[r] = vload(rows[r] + c);
    for (int t = 0; t < TT; ++t) {
      const V xv = vload(x + (t0 + t) * in + c);
      for (int r = 0; r < R; ++r) acc[r][t] = vfma(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < TT; ++t) {
      float s = vsum(acc[r][t]);
      for (int64_t cc = c; cc < in; ++cc)
        s = sfma(x[(t0 + t) * in + cc], scalar_load(rows[r] + cc), s);
      y[(t0 + t) * k + j0 + r] = s;
    }
  }
}

template <int R, typename WT>
inline void dot_tokens(const float* x, int64_t T, int64_t in, const int64_t* idx, int64_t j0,
                       const WT* w, float* y, int64_t k) {
  int64_t t = 0;
  for (; t + 4 <= T; t += 4) dot_rows<R, 4>(x, in, idx, j0, w, y, k, t);
  switch (T - t) {
    case 3: dot_rows<R, 3>(x, in, idx, j0, w, y, k, t); break;
    case 2: dot_rows<R, 2>(x, in, idx, j0, w, y, k, t); break;
    case 1: dot_rows<R, 1>(x, in, idx, j0, w, y, k, t); break;
    default: break;
  }
}

// y[:, j0:j1] of y (T, k) = x (T, in) @ w[idx[j0:j1]]^T.
template <typename WT>
void rows_block(const float* x, int64_t T, int64_t in, const int64_t* idx, const WT* w,
                float* y, int64_t k, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + kDotRows <= j1; j += kDotRows) dot_tokens<kDotRows>(x, T, in, idx, j, w, y, k);
  for (; j < j1; ++j) dot_tokens<1>(x, T, in, idx, j, w, y, k);
}

// The entry points sparse_decode.cpp dispatches to (weights float32 or bfloat16 bits).
inline void cols(const float* xc, int64_t T, int64_t k, const int64_t* idx, const void* wt,
                 bool bf16, int64_t out, const float* bias, float* y, int64_t c0, int64_t c1) {
  if (bf16) {
    cols_block(xc, T, k, idx, static_cast<const uint16_t*>(wt), out, bias, y, c0, c1);
  } else {
    cols_block(xc, T, k, idx, static_cast<const float*>(wt), out, bias, y, c0, c1);
  }
}

inline void rows(const float* x, int64_t T, int64_t in, const int64_t* idx, const void* w,
                 bool bf16, float* y, int64_t k, int64_t j0, int64_t j1) {
  if (bf16) {
    rows_block(x, T, in, idx, static_cast<const uint16_t*>(w), y, k, j0, j1);
  } else {
    rows_block(x, T, in, idx, static_cast<const float*>(w), y, k, j0, j1);
  }
}
