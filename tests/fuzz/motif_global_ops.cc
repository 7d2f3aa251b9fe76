// Global-module motifs of single ops with layouts of their own (weave-fuzz --global): a
// convolution with random dim labels, windows and groups, and JAX's block-scaled FP8 dot. Split
// from motif_global.cc, which holds the program level, shardings and the dot/MLP/elementwise/
// reshard/gather-scatter motifs.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"
#include "program_gen_internal.h"

namespace weave::fuzz {

// A convolution with random dim labels (the operands' dims in any order), 1 or 2 spatial dims,
// windows with stride, padding (negative too), window and base dilation and reversal, feature
// or batch groups, sometimes a kernel nearly as long as the input (a filter gradient), and
// random shardings (uneven tiles allowed) on both operands and sometimes on the result: the
// partitioner's einsum mapping, halo exchange and group splitting.
void Generator::GlobalMotifConvolution(const Mesh& mesh) {
  const std::string wide = Wide();
  const size_t ns = 1 + c_.Below(2);
  auto pick = [&](std::initializer_list<int64_t> v) { return std::vector<int64_t>(v)[c_.Below(v.size())]; };  // NOLINT
  int64_t batch = pick({2, 3, 4, 6}), feat = pick({2, 4, 6, 8}), ofeat = pick({2, 3, 4, 8});
  int64_t fgc = 1, bgc = 1;
  const size_t groups = c_.Weighted({70, 18, 12});
  if (groups == 1) {
    fgc = feat;
    if (c_.Percent(40) && feat % 2 == 0) fgc = feat / 2;
    ofeat = fgc * pick({1, 2});
  } else if (groups == 2) {
    bgc = pick({2, 3});
    batch = bgc * pick({1, 2});
    ofeat = bgc * pick({1, 2});
  }
  std::vector<int64_t> lsz, ksz, osz;
  std::vector<std::string> size, stride, pad, lhs_d, rhs_d, rev;
  bool any_ld = false, any_rd = false, any_rev = false;
  for (size_t j = 0; j < ns; ++j) {
    const int64_t l = ns == 1 ? 5 + static_cast<int64_t>(c_.Below(12)) : 4 + static_cast<int64_t>(c_.Below(7));
    int64_t w = 1 + static_cast<int64_t>(c_.Below(4)), st = 1 + static_cast<int64_t>(c_.Below(2));
    int64_t lo = static_cast<int64_t>(c_.Below(4)) - 1, hi = static_cast<int64_t>(c_.Below(4)) - 1;
    int64_t ld = c_.Percent(8) ? 2 : 1, rd = c_.Percent(15) ? 2 : 1;
    const bool r = c_.Percent(10);
    if (c_.Percent(25)) {  // a filter gradient: the window spans most of the input
      w = std::max<int64_t>(1, l - static_cast<int64_t>(c_.Below(3)));
      st = 1;
      rd = 1;
      ld = 1;
    } else if (c_.Percent(20)) {  // pointwise
      w = 1, st = 1, lo = 0, hi = 0, ld = 1, rd = 1;
    }
    const int64_t padded = (l - 1) * ld + 1 + lo + hi, eff = (w - 1) * rd + 1;
    if (padded < eff) {
      lo = std::max<int64_t>(lo, 0);
      hi = std::max<int64_t>(hi, 0);
      w = 1, rd = 1;
    }
    const int64_t o = ((l - 1) * ld + 1 + lo + hi - ((w - 1) * rd + 1)) / st + 1;
    lsz.push_back(l);
    ksz.push_back(w);
    osz.push_back(o);
    size.push_back(absl::StrCat(w));
    stride.push_back(absl::StrCat(st));
    pad.push_back(absl::StrCat(lo, "_", hi));
    lhs_d.push_back(absl::StrCat(ld));
    rhs_d.push_back(absl::StrCat(rd));
    rev.push_back(r ? "1" : "0");
    any_ld |= ld != 1;
    any_rd |= rd != 1;
    any_rev |= r;
  }
  // Dim orders: a random permutation of the labels per operand.
  auto layout = [&](char a, char b) {
    std::vector<char> l = {a, b};
    for (size_t j = 0; j < ns; ++j) l.push_back(static_cast<char>('0' + j));
    if (c_.Percent(60)) c_.Shuffle(l);
    return std::string(l.begin(), l.end());
  };
  const std::string ll = layout('b', 'f'), kl = layout('i', 'o'), ol = layout('b', 'f');
  auto dims_of = [&](const std::string& labels, int64_t a, int64_t b, const std::vector<int64_t>& sp) {
    std::vector<int64_t> d;
    for (char c : labels) {
      d.push_back(c == 'b' || c == 'i' ? a : c == 'f' || c == 'o' ? b : sp[static_cast<size_t>(c - '0')]);
    }
    return d;
  };
  const std::vector<int64_t> ldims = dims_of(ll, batch, feat, lsz);
  const std::vector<int64_t> kdims = dims_of(kl, feat / fgc, ofeat, ksz);
  const std::vector<int64_t> odims = dims_of(ol, batch / bgc, ofeat, osz);
  if (Product(ldims) > o_.max_elements || Product(kdims) > o_.max_elements || Product(odims) > o_.max_elements) {
    return GlobalMotifDot(mesh);
  }
  uneven_ = c_.Percent(50);
  std::string ld, kd, cd;
  Val x = GlobalOperand(mesh, wide, ldims, &ld);
  Val k = GlobalOperand(mesh, wide, kdims, &kd);
  std::string attrs = absl::StrCat("window={size=", absl::StrJoin(size, "x"), " stride=", absl::StrJoin(stride, "x"),
                                   " pad=", absl::StrJoin(pad, "x"));
  if (any_ld) absl::StrAppend(&attrs, " lhs_dilate=", absl::StrJoin(lhs_d, "x"));
  if (any_rd) absl::StrAppend(&attrs, " rhs_dilate=", absl::StrJoin(rhs_d, "x"));
  if (any_rev) absl::StrAppend(&attrs, " rhs_reversal=", absl::StrJoin(rev, "x"));
  absl::StrAppend(&attrs, "}, dim_labels=", ll, "_", kl, "->", ol);
  if (fgc > 1) absl::StrAppend(&attrs, ", feature_group_count=", fgc);
  if (bgc > 1) absl::StrAppend(&attrs, ", batch_group_count=", bgc);
  if (!shardy_ && c_.Percent(40)) absl::StrAppend(&attrs, ", sharding=", GlobalSharding(mesh, odims, &cd));
  Val v = b_.Op("convolution", wide, odims, {x, k}, attrs, "conv");
  uneven_ = false;
  GlobalOutput(mesh, v);
  motifs_.push_back(absl::StrCat("gconv ", ll, "_", kl, "->", ol, " lhs=", ld, " kernel=", kd,
                                 fgc > 1 ? absl::StrCat(" fgc=", fgc) : "", bgc > 1 ? absl::StrCat(" bgc=", bgc) : "",
                                 cd.empty() ? "" : " conv:" + cd));
}

// JAX's block-scaled FP8 (MXFP8): `__op$block_scaled_dot(lhs, rhs, lhs_scale[, rhs_scale[,
// global_scale]])`, contracting dim last (K = 32 x a few blocks), batch dim 0 at rank 3; the lhs
// sometimes quantized from a wide parameter by `__op$quantize`. Each scale is sharded like its
// data most of the time (else at random: the partitioner must reshard them together), so that
// the partitioner's scale rules, block-scaled-windowed-einsum and block-scaling-rewriter run on
// any sharding.
void Generator::GlobalMotifBlockScaled(const Mesh& mesh) {
  const std::string wide = Wide();
  const bool batched = c_.Percent(30);
  static const int64_t kBlocks[] = {1, 2, 4, 8, 3, 6};
  const int64_t kb = kBlocks[c_.Weighted({20, 25, 20, 10, 15, 10})];
  const int64_t k = 32 * kb;
  const int64_t b = batched ? GlobalSize(c_) : 0;
  const int64_t m = GlobalSize(c_) * (c_.Percent(50) ? 2 : 1), n = GlobalSize(c_);
  auto dims_of = [&](int64_t rows, int64_t last) {
    std::vector<int64_t> d;
    if (batched) d.push_back(b);
    d.push_back(rows);
    d.push_back(last);
    return d;
  };
  auto sharded = [&](const std::string& type, const std::vector<int64_t>& dims, const std::string& sharding,
                     const std::string& hint) {
    if (shardy_) {
      Val v = b_.Param(type, dims, "", hint);
      b_.AppendToLastLine(absl::StrCat(", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, ",
                                       sharding, ">\"}"));
      return v;
    }
    return b_.Param(type, dims, sharding, hint);
  };
  // One side: (data, scale) parameters, or a quantize of a wide parameter.
  auto side = [&](int64_t rows, bool quantize, std::string* desc) -> std::pair<Val, Val> {
    std::string dd, sd;
    const std::string s = GlobalSharding(mesh, dims_of(rows, k), &dd);
    const std::string data_type = c_.Percent(80) ? "f8e4m3fn" : "f8e5m2";
    if (quantize) {
      Val x = sharded(wide, dims_of(rows, k), s, "x");
      const std::string shape = absl::StrCat("(", ShapeText(data_type, dims_of(rows, k)), ", ",
                                             ShapeText("f8e8m0fnu", dims_of(rows, kb)), ")");
      const std::string t = b_.OpRaw("custom-call", shape, {x.name}, "custom_call_target=\"__op$quantize\"", "quantized");
      Val tv;
      tv.name = t;
      tv.type = "tuple";
      Val q = b_.Op("get-tuple-element", data_type, dims_of(rows, k), {tv}, "index=0", "q");
      Val qs = b_.Op("get-tuple-element", "f8e8m0fnu", dims_of(rows, kb), {tv}, "index=1", "q_scale");
      *desc = absl::StrCat("quantize(", wide, ":", dd, ")");
      return {q, qs};
    }
    Val d = sharded(data_type, dims_of(rows, k), s, "mx");
    const bool same = c_.Percent(70);
    const std::string ss = same ? s : GlobalSharding(mesh, dims_of(rows, kb), &sd);
    Val sc = sharded("f8e8m0fnu", dims_of(rows, kb), ss, "mx_scale");
    *desc = absl::StrCat(data_type, ":", dd, same ? " scale alike" : " scale:" + sd);
    return {d, sc};
  };
  std::string ld, rd;
  auto [lhs, lhs_scale] = side(m, c_.Percent(35), &ld);
  auto [rhs, rhs_scale] = side(n, false, &rd);
  std::vector<Val> ops = {lhs, rhs, lhs_scale, rhs_scale};
  const bool global = c_.Percent(20);
  if (global) ops.push_back(b_.Param(wide, {}, shardy_ ? "" : "{replicated}", "global_scale"));
  std::vector<int64_t> out;
  if (batched) out.push_back(b);
  out.push_back(m);
  out.push_back(n);
  std::string attrs = "custom_call_target=\"__op$block_scaled_dot\"";
  std::string osd;
  if (!shardy_ && c_.Percent(30)) absl::StrAppend(&attrs, ", sharding=", GlobalSharding(mesh, out, &osd));
  Val d = b_.Op("custom-call", wide, out, ops, attrs, "bsdot");
  GlobalOutput(mesh, d);
  motifs_.push_back(absl::StrCat("gmxdot lhs=", ld, " rhs=", rd, " k=", k, global ? " global" : "",
                                 osd.empty() ? "" : " dot:" + osd));
}

}  // namespace weave::fuzz
