// The generator's operands (generator.h): scales, dequantizations, leaves, views before a
// collective or a dot, and epilogues after a dot.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

// A scalar scale of type `wide`. *replicated says whether it is the same on every partition.
Val Generator::ScalarScale(const std::string& wide, bool* replicated) {
  switch (c_.Weighted({60, 15, 12, 9, 4})) {
    case 0:
      *replicated = true;
      return b_.Param(wide, {}, "{replicated}", "scale");
    case 1:
      *replicated = false;  // {manual}: one value per partition
      return b_.Param(wide, {}, "{manual}", "scale");
    case 2: {
      *replicated = true;
      static const char* kLits[] = {"0.5", "2", "1.5", "0.125", "3"};
      return b_.ScalarConstant(wide, kLits[c_.Below(5)], "scale");
    }
    case 3: {  // 1 + 0.25 * partition-id
      *replicated = false;
      Val pid = b_.Op("partition-id", "u32", {}, {}, "", "pid");
      Val f = b_.Op("convert", wide, {}, {pid}, "", "pidf");
      Val q = b_.ScalarConstant(wide, "0.25");
      Val one = b_.ScalarConstant(wide, "1");
      Val m = b_.Op("multiply", wide, {}, {f, q});
      return b_.Op("add", wide, {}, {m, one}, "", "scale");
    }
    default: {  // computed from a replicated value
      *replicated = true;
      Val p = b_.Param(wide, {}, "{replicated}", "scale_in");
      Val a = b_.Op("abs", wide, {}, {p});
      Val h = b_.ScalarConstant(wide, "0.5");
      return b_.Op("add", wide, {}, {a, h}, "", "scale");
    }
  }
}

// dequant(q, s) of type `wide` and dims `dims`, in one of the forms of the file comment.
Val Generator::Dequantize(const std::string& wide, const std::vector<int64_t>& dims, std::string* desc) {
  const std::string f8 = Fp8();
  Val q = b_.Param(f8, dims, ParamSharding(dims), "q");
  Val cvt = b_.Op("convert", wide, dims, {q}, "", "dq.cvt");
  bool replicated = true;
  Val bc;
  const bool rowwise = !dims.empty() && c_.Percent(15);
  if (rowwise) {
    const int64_t k = static_cast<int64_t>(c_.Below(dims.size()));
    replicated = c_.Percent(70);
    Val s = b_.Param(wide, {dims[static_cast<size_t>(k)]}, replicated ? "{replicated}" : "{manual}",
                     "scale");
    bc = b_.Op("broadcast", wide, dims, {s}, absl::StrCat("dimensions={", k, "}"), "dq.bcast");
  } else {
    Val s = ScalarScale(wide, &replicated);
    bc = b_.Op("broadcast", wide, dims, {s}, "dimensions={}", "dq.bcast");
  }
  const size_t form = c_.Weighted({50, 25, 25});
  Val r;
  if (form == 0) {
    r = b_.Op("multiply", wide, dims, {cvt, bc}, "", "dq");
  } else if (form == 1) {
    r = b_.Op("multiply", wide, dims, {bc, cvt}, "", "dq");
  } else {
    r = b_.Op("divide", wide, dims, {cvt, bc}, "", "dq");
  }
  *desc = absl::StrCat(f8, form == 2 ? "/" : "*", rowwise ? "row" : "scalar",
                       replicated ? "" : "(pd)");
  return r;
}

// dequant(q, s) as FP8 models write it: E4M3FN (or E5M2) data, a replicated scalar scale
// (parameter or constant), any of the three forms.
Val Generator::ModelDequantize(const std::string& wide, const std::vector<int64_t>& dims, std::string* desc) {
  const std::string f8 = c_.Percent(15) ? "f8e5m2" : "f8e4m3fn";
  Val q = b_.Param(f8, dims, ParamSharding(dims), "q");
  Val cvt = b_.Op("convert", wide, dims, {q}, "", "dq.cvt");
  Val s = c_.Percent(80) ? b_.Param(wide, {}, "{replicated}", "scale")
                         : b_.ScalarConstant(wide, c_.Percent(50) ? "0.5" : "2", "scale");
  Val bc = b_.Op("broadcast", wide, dims, {s}, "dimensions={}", "dq.bcast");
  const size_t form = c_.Weighted({50, 25, 25});
  Val r = form == 0   ? b_.Op("multiply", wide, dims, {cvt, bc}, "", "dq")
          : form == 1 ? b_.Op("multiply", wide, dims, {bc, cvt}, "", "dq")
                      : b_.Op("divide", wide, dims, {cvt, bc}, "", "dq");
  *desc = absl::StrCat(f8, form == 2 ? "/" : "*", "model");
  return r;
}

// A value of type `wide` and dims `dims`: a parameter, a dequantization, an unscaled convert
// of FP8, or a convert from another wide type. *desc says which.
Val Generator::Leaf(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
         std::string* desc) {
  const int rest = 100 - fp8_percent;
  switch (c_.Weighted({fp8_percent, rest * 8 / 10, rest / 10, rest / 10})) {
    case 0: return Dequantize(wide, dims, desc);
    case 1:
      *desc = "wide";
      return b_.Param(wide, dims, ParamSharding(dims), "x");
    case 2: {
      *desc = "convert(f8)";
      Val q = b_.Param(Fp8(), dims, ParamSharding(dims), "q");
      return b_.Op("convert", wide, dims, {q}, "", "cvt");
    }
    default: {
      const std::string other = wide == "f32" ? "bf16" : "f32";
      *desc = absl::StrCat("convert(", other, ")");
      Val p = b_.Param(other, dims, ParamSharding(dims), "x");
      return b_.Op("convert", wide, dims, {p}, "", "cvt");
    }
  }
}

// A value of `dims`, built from a Leaf through 0-2 views chosen backwards (each view's
// operand shape is derived from its result shape).
Val Generator::Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
            int view_percent, std::string* desc, int depth) {
  if (fp8_model_) return ModelDequantize(wide, dims, desc);
  if (depth >= 2 || !c_.Percent(view_percent)) return Leaf(wide, dims, fp8_percent, desc);
  const int64_t rank = static_cast<int64_t>(dims.size());
  switch (c_.Weighted({25, 25, 12, 10, 12, 8, 8})) {
    case 0: {  // transpose: out[i] = in[perm[i]]
      if (rank < 2) break;
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      c_.Shuffle(perm);
      std::vector<int64_t> in(static_cast<size_t>(rank));
      for (int64_t i = 0; i < rank; ++i) in[static_cast<size_t>(perm[static_cast<size_t>(i)])] = dims[static_cast<size_t>(i)];
      Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
      *desc += ">transpose";
      return b_.Op("transpose", wide, dims, {v}, absl::StrCat("dimensions={", IntList(perm), "}"));
    }
    case 1:    // reshape
    case 2: {  // bitcast (a reshape of a row-major array)
      std::vector<int64_t> in = ReshapeSource(dims);
      if (in == dims) break;
      Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
      const bool bitcast = c_.Percent(30);
      *desc += bitcast ? ">bitcast" : ">reshape";
      return b_.Op(bitcast ? "bitcast" : "reshape", wide, dims, {v});
    }
    case 3: {  // copy
      Val v = Operand(wide, dims, fp8_percent, view_percent, desc, depth + 1);
      *desc += ">copy";
      return b_.Op("copy", wide, dims, {v});
    }
    case 4: {  // slice of a larger value
      if (rank == 0) break;
      std::vector<int64_t> in = dims;
      const size_t k = static_cast<size_t>(c_.Below(static_cast<uint64_t>(rank)));
      const int64_t extra = 1 + static_cast<int64_t>(c_.Below(3));
      const bool strided = c_.Percent(25);
      in[k] = strided ? dims[k] * 2 : dims[k] + extra;
      Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
      std::vector<std::string> ranges;
      for (size_t i = 0; i < dims.size(); ++i) {
        if (i != k) {
          ranges.push_back(absl::StrCat("[0:", dims[i], (strided ? ":1" : ""), "]"));
        } else if (strided) {
          ranges.push_back(absl::StrCat("[0:", in[i], ":2]"));
        } else {
          const int64_t start = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(extra + 1)));
          ranges.push_back(absl::StrCat("[", start, ":", start + dims[i], "]"));
        }
      }
      *desc += ">slice";
      return b_.Op("slice", wide, dims, {v}, absl::StrCat("slice={", absl::StrJoin(ranges, ", "), "}"));
    }
    case 5: {  // convert from another wide type
      const std::string other = wide == "f32" ? "bf16" : "f32";
      Val v = Operand(other, dims, fp8_percent, view_percent, desc, depth + 1);
      *desc += absl::StrCat(">convert");
      return b_.Op("convert", wide, dims, {v});
    }
    default: {  // broadcast along one dim
      if (rank == 0) break;
      const int64_t k = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
      std::vector<int64_t> in, bdims;
      for (int64_t i = 0; i < rank; ++i) {
        if (i == k) continue;
        in.push_back(dims[static_cast<size_t>(i)]);
        bdims.push_back(i);
      }
      Val v = Operand(wide, in, fp8_percent, view_percent, desc, depth + 1);
      *desc += ">broadcast";
      return b_.Op("broadcast", wide, dims, {v}, absl::StrCat("dimensions={", IntList(bdims), "}"));
    }
  }
  return Leaf(wide, dims, fp8_percent, desc);
}

// A shape with the same element count that reshapes to `dims`: two adjacent dims merged, one
// split in two, or a unit dim added or removed.
std::vector<int64_t> Generator::ReshapeSource(const std::vector<int64_t>& dims) {
  std::vector<int64_t> in = dims;
  switch (c_.Weighted({40, 35, 15, 10})) {
    case 0:
      if (dims.size() >= 2) {
        const size_t i = static_cast<size_t>(c_.Below(dims.size() - 1));
        in[i] *= in[i + 1];
        in.erase(in.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      }
      break;
    case 1:
      for (size_t i = 0; i < dims.size(); ++i) {
        for (int64_t f : {2, 3}) {
          if (dims[i] % f == 0 && dims[i] > f && in == dims) {
            in[i] = f;
            in.insert(in.begin() + static_cast<std::ptrdiff_t>(i) + 1, dims[i] / f);
          }
        }
      }
      break;
    case 2:
      in.insert(in.begin() + static_cast<std::ptrdiff_t>(c_.Below(dims.size() + 1)), 1);
      break;
    default:
      for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == 1) {
          in.erase(in.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
      break;
  }
  return in;
}

// A forward layout change of `v` (transpose, reshape, copy, bitcast) keeping `keep_dim`'s
// extent on some dim; returns the new value and the new position of keep_dim (-1 to ignore).
Val Generator::ForwardView(const Val& v, int64_t* keep_dim) {
  const int64_t rank = static_cast<int64_t>(v.dims.size());
  switch (c_.Weighted({40, 35, 25})) {
    case 0: {
      if (rank < 2) break;
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      c_.Shuffle(perm);
      std::vector<int64_t> out;
      for (int64_t p : perm) out.push_back(v.dims[static_cast<size_t>(p)]);
      if (*keep_dim >= 0) {
        for (int64_t j = 0; j < rank; ++j) {
          if (perm[static_cast<size_t>(j)] == *keep_dim) {
            *keep_dim = j;
            break;
          }
        }
      }
      return b_.Op("transpose", v.type, out, {v}, absl::StrCat("dimensions={", IntList(perm), "}"));
    }
    case 1: {  // reshape that splits or merges dims other than keep_dim
      std::vector<int64_t> out;
      int64_t new_keep = -1;
      bool merged = false;
      for (int64_t i = 0; i < rank; ++i) {
        const int64_t d = v.dims[static_cast<size_t>(i)];
        if (i == *keep_dim) {
          new_keep = static_cast<int64_t>(out.size());
          out.push_back(d);
        } else if (!merged && i + 1 < rank && i + 1 != *keep_dim) {
          out.push_back(d * v.dims[static_cast<size_t>(i + 1)]);
          merged = true;
          ++i;
        } else {
          out.push_back(d);
        }
      }
      if (!merged) break;
      *keep_dim = *keep_dim >= 0 ? new_keep : -1;
      return b_.Op(c_.Percent(25) ? "bitcast" : "reshape", v.type, out, {v});
    }
    default:
      return b_.Op("copy", v.type, v.dims, {v});
  }
  return b_.Op("copy", v.type, v.dims, {v});
}

Val Generator::Epilogue(Val d) {
  const std::vector<int64_t> dims = d.dims;
  const int64_t rank = static_cast<int64_t>(dims.size());
  switch (c_.Weighted({45, 10, 8, 8, 7, 10, 7, 5})) {
    case 0:
      return d;
    case 1: {  // bias along the last dim
      if (rank == 0) return d;
      Val bias = b_.Param(d.type, {dims.back()}, c_.Percent(50) ? "{replicated}" : "{manual}", "bias");
      Val bb = b_.Op("broadcast", d.type, dims, {bias}, absl::StrCat("dimensions={", rank - 1, "}"));
      return b_.Op("add", d.type, dims, {d, bb}, "", "biased");
    }
    case 2: {  // ReLU
      Val z = b_.Splat(d.type, "0", dims);
      return b_.Op("maximum", d.type, dims, {d, z}, "", "relu");
    }
    case 3: {  // alpha
      static const char* kAlpha[] = {"2", "0.5", "-1.5"};
      Val a = b_.Splat(d.type, kAlpha[c_.Below(3)], dims);
      return b_.Op("multiply", d.type, dims, c_.Percent(50) ? std::vector<Val>{d, a}
                                                            : std::vector<Val>{a, d}, "", "scaled");
    }
    case 4: {  // convert
      const std::string t = d.type == "f32" ? "bf16" : "f32";
      return b_.Op("convert", t, dims, {d}, "", "cvt_out");
    }
    case 5: {  // FP8 output (XLA's pattern), sometimes with its amax
      const bool e5 = c_.Percent(25);
      const std::string f8 = e5 ? "f8e5m2" : "f8e4m3fn";
      const char* max = e5 ? "57344" : "448";
      Val x = d;
      if (d.type != "f32" && d.type != "bf16" && d.type != "f16") return d;
      if (c_.Percent(60)) {
        Val s = b_.Param(d.type, {}, "{replicated}", "out_scale");
        Val sb = b_.Op("broadcast", d.type, dims, {s}, "dimensions={}");
        x = b_.Op(c_.Percent(70) ? "divide" : "multiply", d.type, dims, {d, sb}, "", "out_scaled");
      }
      if (c_.Percent(40) && rank > 0) {
        Val z = b_.ScalarConstant(d.type, "0");
        Val a = b_.Op("abs", d.type, dims, {d});
        std::vector<int64_t> all(static_cast<size_t>(rank));
        std::iota(all.begin(), all.end(), 0);
        outputs_.push_back(b_.Op("reduce", d.type, {}, {a, z},
                                 absl::StrCat("dimensions={", IntList(all), "}, to_apply=",
                                              b_.Reducer("maximum", d.type)),
                                 "amax"));
      }
      Val lo = b_.Splat(d.type, absl::StrCat("-", max), dims);
      Val hi = b_.Splat(d.type, max, dims);
      Val cl = b_.Op("clamp", d.type, dims, {lo, x, hi}, "", "clamped");
      return b_.Op("convert", f8, dims, {cl}, "", "out_f8");
    }
    case 6: {  // layout change
      int64_t keep = -1;
      return ForwardView(d, &keep);
    }
    default:
      return b_.Op(c_.Percent(50) ? "negate" : "abs", d.type, dims, {d});
  }
}

}  // namespace weave::fuzz
