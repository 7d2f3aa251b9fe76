// XLA's linear-algebra ops in the reference evaluator, on the trailing two dims (the leading ones
// are batch dims), computed in double and rounded once to the result type:
//   triangular-solve(a, b)  left_side=true: op(a) x = b, a [.., m, m], b [.., m, n]; false:
//                           x op(a) = b, b [.., n, m]. Only the triangle `lower` names is read;
//                           unit_diagonal=true takes the diagonal as ones; transpose_a
//                           NO_TRANSPOSE, TRANSPOSE or ADJOINT (the same for real types) gives
//                           op(a). Forward or back substitution (XLA's TriangularSolveExpander
//                           semantics; a zero pivot gives inf or NaN, as the division does).
//   cholesky(a)             lower=true: L with L L^T = a in the lower triangle, zeros above;
//                           lower=false: U with U^T U = a in the upper triangle. Only that
//                           triangle of a is read. A matrix that is not positive definite gives
//                           NaN from the first failing pivot on (XLA leaves it unspecified).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"

namespace weave::eval::internal {
namespace {

// A boolean attribute (`key=true`), `def` when absent.
bool Flag(const HloInstruction& instr, const char* key, bool def) {
  const std::string* v = instr.GetRawAttribute(key);
  return v == nullptr ? def : *v == "true";
}

}  // namespace

absl::StatusOr<Value> TriangularSolve(const HloInstruction& instr, const Value& a, const Value& b) {
  const size_t ra = a.shape.dims.size(), rb = b.shape.dims.size();
  if (ra < 2 || ra != rb || a.shape.dims[ra - 1] != a.shape.dims[ra - 2]) {
    return absl::InvalidArgumentError("triangular-solve needs a [.., m, m] and b of the same rank");
  }
  const bool left = Flag(instr, "left_side", false), lower = Flag(instr, "lower", false);
  const bool unit = Flag(instr, "unit_diagonal", false);
  const std::string* ta = instr.GetRawAttribute("transpose_a");
  const bool transposed = ta != nullptr && (*ta == "TRANSPOSE" || *ta == "ADJOINT");
  if (ta != nullptr && !transposed && *ta != "NO_TRANSPOSE") {
    return absl::InvalidArgumentError(absl::StrCat("transpose_a=", *ta, " is not NO_TRANSPOSE, TRANSPOSE or ADJOINT"));
  }
  const int64_t m = a.shape.dims[ra - 1];
  const int64_t rows = b.shape.dims[rb - 2], cols = b.shape.dims[rb - 1];
  if ((left ? rows : cols) != m) {
    return absl::InvalidArgumentError(absl::StrCat("triangular-solve: b ", b.shape.ToString(false), " does not fit a ",
                                                   a.shape.ToString(false), left ? " on the left" : " on the right"));
  }
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < ra; ++d) {
    if (a.shape.dims[d] != b.shape.dims[d]) return absl::InvalidArgumentError("triangular-solve batch dims differ");
    batch *= a.shape.dims[d];
  }
  // op(a)[i][k], read from the triangle `lower` names.
  auto A = [&](int64_t base, int64_t i, int64_t k) -> double {
    if (i == k && unit) return 1.0;
    return transposed ? a.GetDouble(base + k * m + i) : a.GetDouble(base + i * m + k);
  };
  // op(a) is lower triangular when a's triangle is lower and not transposed, or upper and
  // transposed. Right side: x op(a) = b is op(a)^T x^T = b^T, whose matrix is lower when op(a) is
  // upper.
  const bool op_lower = lower != transposed;
  Value out = Value::Zeros(b.shape);
  std::vector<double> x(static_cast<size_t>(rows * cols));
  for (int64_t t = 0; t < batch; ++t) {
    const int64_t abase = t * m * m, bbase = t * rows * cols;
    for (int64_t k = 0; k < rows * cols; ++k) x[static_cast<size_t>(k)] = b.GetDouble(bbase + k);
    if (left) {
      // op(a) x = b, column by column of x.
      for (int64_t step = 0; step < m; ++step) {
        const int64_t i = op_lower ? step : m - 1 - step;
        for (int64_t c = 0; c < cols; ++c) {
          double s = x[static_cast<size_t>(i * cols + c)];
          for (int64_t k = op_lower ? 0 : i + 1; k < (op_lower ? i : m); ++k) {
            s -= A(abase, i, k) * x[static_cast<size_t>(k * cols + c)];
          }
          x[static_cast<size_t>(i * cols + c)] = s / A(abase, i, i);
        }
      }
    } else {
      // x op(a) = b: x[r][j] = (b[r][j] - sum_{k != j} x[r][k] op(a)[k][j]) / op(a)[j][j], with j
      // from the last to the first when op(a) is lower, the first to the last when upper.
      for (int64_t step = 0; step < m; ++step) {
        const int64_t j = op_lower ? m - 1 - step : step;
        for (int64_t r = 0; r < rows; ++r) {
          double s = x[static_cast<size_t>(r * cols + j)];
          for (int64_t k = op_lower ? j + 1 : 0; k < (op_lower ? m : j); ++k) {
            s -= x[static_cast<size_t>(r * cols + k)] * A(abase, k, j);
          }
          x[static_cast<size_t>(r * cols + j)] = s / A(abase, j, j);
        }
      }
    }
    for (int64_t k = 0; k < rows * cols; ++k) out.SetDouble(bbase + k, x[static_cast<size_t>(k)]);
  }
  return out;
}

absl::StatusOr<Value> Cholesky(const HloInstruction& instr, const Value& a) {
  const size_t r = a.shape.dims.size();
  if (r < 2 || a.shape.dims[r - 1] != a.shape.dims[r - 2]) {
    return absl::InvalidArgumentError("cholesky needs a [.., n, n] operand");
  }
  const bool lower = Flag(instr, "lower", false);
  const int64_t n = a.shape.dims[r - 1];
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < r; ++d) batch *= a.shape.dims[d];
  Value out = Value::Zeros(a.shape);
  std::vector<double> l(static_cast<size_t>(n * n));
  for (int64_t t = 0; t < batch; ++t) {
    const int64_t base = t * n * n;
    // a[i][j] for j <= i, read from the named triangle.
    auto at = [&](int64_t i, int64_t j) { return lower ? a.GetDouble(base + i * n + j) : a.GetDouble(base + j * n + i); };
    std::fill(l.begin(), l.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        double s = at(i, j);
        for (int64_t k = 0; k < j; ++k) s -= l[static_cast<size_t>(i * n + k)] * l[static_cast<size_t>(j * n + k)];
        l[static_cast<size_t>(i * n + j)] = i == j ? (s > 0 ? std::sqrt(s) : std::nan("")) : s / l[static_cast<size_t>(j * n + j)];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        out.SetDouble(base + (lower ? i * n + j : j * n + i), l[static_cast<size_t>(i * n + j)]);
      }
    }
  }
  return out;
}

}  // namespace weave::eval::internal
