// XLA's fft in the reference evaluator. Over the last L = |fft_length| dims of the operand (the
// leading ones are batch dims), as XLA's HLO evaluator and its FftThunk define them:
//   FFT    c[.., n1..nL] -> c, X[k] = sum_n x[n] exp(-2 pi i k.n / N) (per dim, unnormalized);
//   IFFT   c -> c, the inverse: exp(+2 pi i k.n / N), divided by the product of fft_length;
//   RFFT   f32/f64[.., n1..nL] -> c64/c128[.., n1..n(L-1), nL/2+1]: FFT of the real input, the
//          non-redundant half of the last dim;
//   IRFFT  c64/c128[.., n1..n(L-1), nL/2+1] -> f32/f64[.., n1..nL]: the inverse of RFFT (the last
//          dim extended by Hermitian symmetry, X[N-k] = conj(X[k]); the real part).
// Each dim is a direct DFT in double (O(n^2) per line), rounded once to the result type.
// Errors: InvalidArgument naming the instruction for an unknown fft_type, an fft_length that is
// missing, longer than the rank or not matching the shapes, or operand/result types that do not
// fit the fft_type.
#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "eval/evaluator_internal.h"
#include "eval/numerics.h"
#include "hlo/raw_dims_attribute.h"

namespace weave::eval::internal {
namespace {

using C = std::complex<double>;

absl::Status Bad(const HloInstruction& instr, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("fft ", instr.name(), ": ", what));
}

// In-place DFT of every line of `data` (row-major `dims`) along `dim`, over its first `n` entries
// (n <= dims[dim]); sign -1 forward, +1 inverse (unnormalized).
void DftAlong(std::vector<C>* data, const std::vector<int64_t>& dims, size_t dim, int64_t n, int sign) {
  int64_t outer = 1, inner = 1;
  for (size_t e = 0; e < dim; ++e) outer *= dims[e];
  for (size_t e = dim + 1; e < dims.size(); ++e) inner *= dims[e];
  const int64_t len = dims[dim];
  std::vector<C> twiddle(static_cast<size_t>(n)), line(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    if ((4 * k) % n == 0) {  // quarter turns exactly: 1, -i, -1, i (forward)
      const int64_t quarter = 4 * k / n;
      const double re[4] = {1, 0, -1, 0}, im[4] = {0, 1, 0, -1};
      twiddle[static_cast<size_t>(k)] = C(re[quarter], sign * im[quarter]);
      continue;
    }
    const double angle = sign * 2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
    twiddle[static_cast<size_t>(k)] = C(std::cos(angle), std::sin(angle));
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      C* base = data->data() + o * len * inner + in;
      for (int64_t k = 0; k < n; ++k) line[static_cast<size_t>(k)] = base[k * inner];
      for (int64_t k = 0; k < n; ++k) {
        C acc(0.0, 0.0);
        for (int64_t j = 0; j < n; ++j) acc += line[static_cast<size_t>(j)] * twiddle[static_cast<size_t>((k * j) % n)];
        base[k * inner] = acc;
      }
    }
  }
}

}  // namespace

absl::StatusOr<Value> Fft(const HloInstruction& instr, const Value& x) {
  const std::string* type_attr = instr.GetRawAttribute("fft_type");
  const std::string type = type_attr == nullptr ? "FFT" : *type_attr;
  absl::StatusOr<std::vector<int64_t>> lengths = RawDimsAttribute(instr, "fft_length");
  if (!lengths.ok()) return Bad(instr, std::string(lengths.status().message()));
  const Shape& in = x.shape;
  const Shape& out = instr.shape();
  const size_t rank = in.dims.size(), l = lengths->size();
  if (l == 0 || l > rank || out.dims.size() != rank) {
    return Bad(instr, absl::StrCat("fft_length={", absl::StrJoin(*lengths, ","), "} needs 1 to ", rank,
                                   " dims and a result of the operand's rank"));
  }
  const bool forward = type == "FFT" || type == "RFFT";
  const bool real_in = type == "RFFT", real_out = type == "IRFFT";
  if (type != "FFT" && type != "IFFT" && type != "RFFT" && type != "IRFFT") {
    return Bad(instr, absl::StrCat("unknown fft_type ", type));
  }
  if ((x.storage() == Storage::kComplex) == real_in ||
      (StorageFor(out.element_type) == Storage::kComplex) == real_out) {
    return Bad(instr, absl::StrCat(type, " does not take ", std::string(PrimitiveTypeName(in.element_type)), " to ",
                                   std::string(PrimitiveTypeName(out.element_type))));
  }
  // The shapes: every dim as the operand's, except the last fft dim of RFFT/IRFFT.
  const int64_t last = (*lengths)[l - 1];
  for (size_t d = 0; d < rank; ++d) {
    const bool fft_dim = d >= rank - l;
    const int64_t len = fft_dim ? (*lengths)[d - (rank - l)] : in.dims[d];
    int64_t want_in = len, want_out = len;
    if (d == rank - 1 && real_in) want_out = last / 2 + 1;
    if (d == rank - 1 && real_out) want_in = last / 2 + 1;
    if (in.dims[d] != want_in || out.dims[d] != want_out) {
      return Bad(instr, absl::StrCat("the shapes ", in.ToString(false), " -> ", out.ToString(false),
                                     " do not fit ", type, " with fft_length={", absl::StrJoin(*lengths, ","), "}"));
    }
  }
  // Work on the full complex array of the fft dims' lengths.
  std::vector<int64_t> dims = in.dims;
  dims[rank - 1] = last;
  int64_t total = 1;
  for (int64_t e : dims) total *= e;
  std::vector<C> data(static_cast<size_t>(total));
  const int64_t in_last = in.dims[rank - 1], rows = in_last == 0 ? 0 : x.size() / in_last;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in_last; ++k) {
      const int64_t src = r * in_last + k;
      data[static_cast<size_t>(r * last + k)] =
          x.storage() == Storage::kComplex ? x.c[static_cast<size_t>(src)] : C(x.GetDouble(src), 0.0);
    }
    if (real_out) {  // Hermitian extension of the last dim
      for (int64_t k = in_last; k < last; ++k) {
        data[static_cast<size_t>(r * last + k)] = std::conj(data[static_cast<size_t>(r * last + (last - k))]);
      }
    }
  }
  if (real_out && l > 1) {
    // The Hermitian extension holds per line only once the other fft dims are transformed back:
    // redo it after the inverse over the leading fft dims.
    for (size_t d = rank - l; d + 1 < rank; ++d) DftAlong(&data, dims, d, dims[d], +1);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = in_last; k < last; ++k) {
        data[static_cast<size_t>(r * last + k)] = std::conj(data[static_cast<size_t>(r * last + (last - k))]);
      }
    }
    DftAlong(&data, dims, rank - 1, last, +1);
  } else {
    for (size_t d = rank - l; d < rank; ++d) DftAlong(&data, dims, d, dims[d], forward ? -1 : +1);
  }
  double scale = 1.0;
  if (!forward) {
    for (int64_t len : *lengths) scale *= static_cast<double>(len);
  }
  Value r = Value::Zeros(out);
  const int64_t out_last = out.dims[rank - 1];
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t k = 0; k < out_last; ++k) {
      const C z = data[static_cast<size_t>(row * last + k)] / scale;
      const int64_t dst = row * out_last + k;
      if (real_out) {
        r.SetDouble(dst, z.real());
      } else {
        r.c[static_cast<size_t>(dst)] = RoundComplex(z, out.element_type);
      }
    }
  }
  return r;
}

}  // namespace weave::eval::internal
