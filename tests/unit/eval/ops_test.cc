// Per-opcode tests of the evaluator on small modules, against hand-computed values.
#include <cmath>
#include <limits>

#include "eval/numerics.h"
#include "eval_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Arr;
using testing::Doubles;
using testing::RunWith;

constexpr PrimitiveType F32 = PrimitiveType::F32;
constexpr PrimitiveType S32 = PrimitiveType::S32;

std::vector<double> Run1(const std::string& text, const std::vector<ValuePtr>& args,
                         size_t output = 0) {
  auto out = RunWith(text, args);
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (!out.ok()) return {};
  return Doubles(*(*out)[0].at(output));
}

TEST(Ops, ElementwiseF32) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  s = f32[4] add(a, b)
  d = f32[4] subtract(a, b)
  p = f32[4] multiply(a, b)
  q = f32[4] divide(a, b)
  mx = f32[4] maximum(a, b)
  mn = f32[4] minimum(a, b)
  ng = f32[4] negate(a)
  ab = f32[4] abs(b)
  ROOT t = (f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4]) tuple(s, d, p, q, mx, mn, ng, ab)
})";
  auto a = Arr(F32, {4}, {1, -2, 3, 0.5});
  auto b = Arr(F32, {4}, {4, 5, -6, 0.25});
  EXPECT_THAT(Run1(text, {a, b}, 0), ElementsAre(5, 3, -3, 0.75));
  EXPECT_THAT(Run1(text, {a, b}, 1), ElementsAre(-3, -7, 9, 0.25));
  EXPECT_THAT(Run1(text, {a, b}, 2), ElementsAre(4, -10, -18, 0.125));
  EXPECT_THAT(Run1(text, {a, b}, 3), ElementsAre(0.25, -0.4f, -0.5, 2));
  EXPECT_THAT(Run1(text, {a, b}, 4), ElementsAre(4, 5, 3, 0.5));
  EXPECT_THAT(Run1(text, {a, b}, 5), ElementsAre(1, -2, -6, 0.25));
  EXPECT_THAT(Run1(text, {a, b}, 6), ElementsAre(-1, 2, -3, -0.5));
  EXPECT_THAT(Run1(text, {a, b}, 7), ElementsAre(4, 5, 6, 0.25));
}

TEST(Ops, MaximumPropagatesNan) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  ROOT mx = f32[2] maximum(a, b)
})";
  auto r = Run1(text, {Arr(F32, {2}, {NAN, 1}), Arr(F32, {2}, {1, NAN})});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(std::isnan(r[1]));
}

TEST(Ops, Bf16RoundsEachOp) {
  // 1 + 2^-9 is not a bf16 value: the add computes in f32 then rounds to 1 (RNE).
  const char* text = R"(
HloModule m
ENTRY e {
  a = bf16[3] parameter(0)
  b = bf16[3] parameter(1)
  ROOT s = bf16[3] add(a, b)
})";
  auto r = Run1(text, {Arr(PrimitiveType::BF16, {3}, {1, 1, 256}),
                       Arr(PrimitiveType::BF16, {3}, {std::ldexp(1.0, -9), 0.0078125, 1})});
  // 1 + 2^-7 is representable; 256 + 1 = 257 -> tie between 256 and 258 -> 256 (even).
  EXPECT_THAT(r, ElementsAre(1, 1.0078125, 256));
}

TEST(Ops, IntegerWrapDivisionShift) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = s32[4] parameter(0)
  b = s32[4] parameter(1)
  s = s32[4] add(a, b)
  q = s32[4] divide(a, b)
  r = s32[4] remainder(a, b)
  sl = s32[4] shift-left(a, b)
  sra = s32[4] shift-right-arithmetic(a, b)
  srl = s32[4] shift-right-logical(a, b)
  ROOT t = (s32[4], s32[4], s32[4], s32[4], s32[4], s32[4]) tuple(s, q, r, sl, sra, srl)
})";
  const double kMin = -2147483648.0;
  auto a = Arr(S32, {4}, {2147483647, 7, kMin, -8});
  auto b = Arr(S32, {4}, {1, 0, -1, 33});
  EXPECT_THAT(Run1(text, {a, b}, 0), ElementsAre(kMin, 7, kMin - 1 + 4294967296.0, 25));
  // x/0 = -1, INT_MIN/-1 = INT_MIN, -8/33 = 0.
  EXPECT_THAT(Run1(text, {a, b}, 1), ElementsAre(2147483647, -1, kMin, 0));
  // x%0 = x, INT_MIN%-1 = 0.
  EXPECT_THAT(Run1(text, {a, b}, 2), ElementsAre(0, 7, 0, -8));
  // Shift amounts are read as unsigned: -1 and 33 are >= 32, giving 0 for left/logical shifts
  // and the sign fill for arithmetic shifts. 2147483647 << 1 wraps to -2.
  EXPECT_THAT(Run1(text, {a, b}, 3), ElementsAre(-2, 7, 0, 0));
  EXPECT_THAT(Run1(text, {a, b}, 4), ElementsAre(1073741823, 7, -1, -1));
  EXPECT_THAT(Run1(text, {a, b}, 5), ElementsAre(1073741823, 7, 0, 0));
}

TEST(Ops, UnsignedDivideByZero) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = u32[2] parameter(0)
  b = u32[2] parameter(1)
  ROOT q = u32[2] divide(a, b)
})";
  EXPECT_THAT(Run1(text, {Arr(PrimitiveType::U32, {2}, {10, 9}), Arr(PrimitiveType::U32, {2}, {0, 2})}),
              ElementsAre(4294967295.0, 4));
}

TEST(Ops, BroadcastReshapeTranspose) {
  const char* text = R"(
HloModule m
ENTRY e {
  v = f32[3] parameter(0)
  b = f32[2,3] broadcast(v), dimensions={1}
  c = f32[3,2] broadcast(v), dimensions={0}
  t = f32[3,2] transpose(b), dimensions={1,0}
  r = f32[6] reshape(c)
  ROOT out = (f32[2,3], f32[3,2], f32[6]) tuple(b, t, r)
})";
  auto v = Arr(F32, {3}, {1, 2, 3});
  EXPECT_THAT(Run1(text, {v}, 0), ElementsAre(1, 2, 3, 1, 2, 3));
  EXPECT_THAT(Run1(text, {v}, 1), ElementsAre(1, 1, 2, 2, 3, 3));
  EXPECT_THAT(Run1(text, {v}, 2), ElementsAre(1, 1, 2, 2, 3, 3));
}

TEST(Ops, ConvertAndBitcastConvert) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  i = s32[4] convert(x)
  u = u8[4] convert(x)
  bits = s32[4] bitcast-convert(x)
  ROOT t = (s32[4], u8[4], s32[4]) tuple(i, u, bits)
})";
  auto x = Arr(F32, {4}, {-2.7, 1e20, NAN, 1.0});
  EXPECT_THAT(Run1(text, {x}, 0), ElementsAre(-2, 2147483647, 0, 1));
  EXPECT_THAT(Run1(text, {x}, 1), ElementsAre(0, 255, 0, 1));
  auto bits = Run1(text, {x}, 2);
  ASSERT_EQ(bits.size(), 4u);
  EXPECT_EQ(bits[3], 0x3f800000);
}

TEST(Ops, Dot) {
  // [2,3] x [3,2]: rows (1,2,3),(4,5,6) times columns (7,9,11),(8,10,12).
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {2, 3}, {1, 2, 3, 4, 5, 6}), Arr(F32, {3, 2}, {7, 8, 9, 10, 11, 12})}),
              ElementsAre(58, 64, 139, 154));
}

TEST(Ops, DotBatchedTransposedOperands) {
  // lhs [k=2, batch=2, m=1], rhs [n=2, k=2, batch=2] -> [batch, m, n].
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[2,2,1] parameter(0)
  b = f32[2,2,2] parameter(1)
  ROOT d = f32[2,1,2] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={2}, rhs_contracting_dims={1}
})";
  // a[k,b,0]: k0=(1,2) for b0,b1; k1=(3,4). b[n,k,batch]: flat order n,k,batch.
  auto a = Arr(F32, {2, 2, 1}, {1, 2, 3, 4});
  auto b = Arr(F32, {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  // batch0: a=(1,3); rhs n0: (b[0,0,0]=1, b[0,1,0]=3) -> 1+9=10; n1: (5,7) -> 5+21=26.
  // batch1: a=(2,4); n0: (2,4) -> 4+16=20; n1: (6,8) -> 12+32=44.
  EXPECT_THAT(Run1(text, {a, b}), ElementsAre(10, 26, 20, 44));
}

TEST(Ops, DotBf16AccumulatesInF32AndRounds) {
  // 256 + 1 + 1: accumulated in f32 = 258 (a bf16 value); summing in bf16 would give 256.
  const char* text = R"(
HloModule m
ENTRY e {
  a = bf16[1,3] parameter(0)
  b = bf16[3,1] parameter(1)
  ROOT d = bf16[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  EXPECT_THAT(Run1(text, {Arr(PrimitiveType::BF16, {1, 3}, {256, 1, 1}), Arr(PrimitiveType::BF16, {3, 1}, {1, 1, 1})}),
              ElementsAre(258));
}

TEST(Ops, IntegerDot) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = s32[1,2] parameter(0)
  b = s32[2,1] parameter(1)
  ROOT d = s32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  EXPECT_THAT(Run1(text, {Arr(S32, {1, 2}, {3, -4}), Arr(S32, {2, 1}, {5, 6})}), ElementsAre(-9));
}

TEST(Ops, SliceDynamicSliceUpdate) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[6] parameter(0)
  i = s32[] parameter(1)
  s = f32[2] slice(x), slice={[1:6:3]}
  ds = f32[3] dynamic-slice(x, i), dynamic_slice_sizes={3}
  u = f32[2] constant({10, 20})
  dus = f32[6] dynamic-update-slice(x, u, i)
  ROOT t = (f32[2], f32[3], f32[6]) tuple(s, ds, dus)
})";
  auto x = Arr(F32, {6}, {0, 1, 2, 3, 4, 5});
  EXPECT_THAT(Run1(text, {x, Arr(S32, {}, {2})}, 0), ElementsAre(1, 4));
  EXPECT_THAT(Run1(text, {x, Arr(S32, {}, {2})}, 1), ElementsAre(2, 3, 4));
  // Start 5 is clamped to 6-3=3 for dynamic-slice and to 6-2=4 for the update.
  EXPECT_THAT(Run1(text, {x, Arr(S32, {}, {5})}, 1), ElementsAre(3, 4, 5));
  EXPECT_THAT(Run1(text, {x, Arr(S32, {}, {5})}, 2), ElementsAre(0, 1, 2, 3, 10, 20));
  // Negative start clamps to 0.
  EXPECT_THAT(Run1(text, {x, Arr(S32, {}, {-3})}, 2), ElementsAre(10, 20, 2, 3, 4, 5));
}

TEST(Ops, PadNegativeAndInterior) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  z = f32[] constant(9)
  a = f32[8] pad(x, z), padding=1_2_1
  b = f32[3] pad(x, z), padding=-1_1_0
  c = f32[2] pad(x, z), padding=-2_-1_1
  ROOT t = (f32[8], f32[3], f32[2]) tuple(a, b, c)
})";
  auto x = Arr(F32, {3}, {1, 2, 3});
  EXPECT_THAT(Run1(text, {x}, 0), ElementsAre(9, 1, 9, 2, 9, 3, 9, 9));
  EXPECT_THAT(Run1(text, {x}, 1), ElementsAre(2, 3, 9));
  // interior: 1,9,2,9,3 (5); drop 2 low, 1 high: 2,9.
  EXPECT_THAT(Run1(text, {x}, 2), ElementsAre(2, 9));
}

TEST(Ops, ConcatenateReverseIota) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[2,1] parameter(0)
  b = f32[2,2] parameter(1)
  c = f32[2,3] concatenate(a, b), dimensions={1}
  r = f32[2,3] reverse(c), dimensions={0,1}
  i = s32[2,3] iota(), iota_dimension=1
  ROOT t = (f32[2,3], f32[2,3], s32[2,3]) tuple(c, r, i)
})";
  auto a = Arr(F32, {2, 1}, {1, 2});
  auto b = Arr(F32, {2, 2}, {3, 4, 5, 6});
  EXPECT_THAT(Run1(text, {a, b}, 0), ElementsAre(1, 3, 4, 2, 5, 6));
  EXPECT_THAT(Run1(text, {a, b}, 1), ElementsAre(6, 5, 2, 4, 3, 1));
  EXPECT_THAT(Run1(text, {a, b}, 2), ElementsAre(0, 1, 2, 0, 1, 2));
}

TEST(Ops, ReduceAndArgmax) {
  const char* text = R"(
HloModule m
sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  v = f32[] select(gt, v1, v0)
  i = s32[] select(gt, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[2,3] parameter(0)
  z = f32[] constant(0)
  r0 = f32[3] reduce(x, z), dimensions={0}, to_apply=sum
  r1 = f32[2] reduce(x, z), dimensions={1}, to_apply=sum
  all = f32[] reduce(x, z), dimensions={0,1}, to_apply=sum
  idx = s32[2,3] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zi = s32[] constant(0)
  am = (f32[2], s32[2]) reduce(x, idx, ninf, zi), dimensions={1}, to_apply=argmax
  amv = f32[2] get-tuple-element(am), index=0
  ami = s32[2] get-tuple-element(am), index=1
  ROOT t = (f32[3], f32[2], f32[], f32[2], s32[2]) tuple(r0, r1, all, amv, ami)
})";
  auto x = Arr(F32, {2, 3}, {1, 5, 3, 7, 2, 4});
  EXPECT_THAT(Run1(text, {x}, 0), ElementsAre(8, 7, 7));
  EXPECT_THAT(Run1(text, {x}, 1), ElementsAre(9, 13));
  EXPECT_THAT(Run1(text, {x}, 2), ElementsAre(22));
  EXPECT_THAT(Run1(text, {x}, 3), ElementsAre(5, 7));
  EXPECT_THAT(Run1(text, {x}, 4), ElementsAre(1, 0));
}

TEST(Ops, ReduceWindowMaxPool) {
  const char* text = R"(
HloModule m
mx {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT m = f32[] maximum(x, y)
}
ENTRY e {
  x = f32[5] parameter(0)
  ninf = f32[] constant(-inf)
  ROOT r = f32[3] reduce-window(x, ninf), window={size=3 stride=2 pad=1_1}, to_apply=mx
})";
  // padded: -inf,1,4,2,8,3,-inf; windows at 0,2,4: (-inf,1,4)=4, (4,2,8)=8, (8,3,-inf)=8.
  EXPECT_THAT(Run1(text, {Arr(F32, {5}, {1, 4, 2, 8, 3})}), ElementsAre(4, 8, 8));
}

TEST(Ops, SelectCompareClamp) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  lt = pred[4] compare(a, b), direction=LT
  s = f32[4] select(lt, a, b)
  lo = f32[] constant(-1)
  hi = f32[] constant(1)
  c = f32[4] clamp(lo, a, hi)
  ROOT t = (pred[4], f32[4], f32[4]) tuple(lt, s, c)
})";
  auto a = Arr(F32, {4}, {-3, 0.5, 2, NAN});
  auto b = Arr(F32, {4}, {0, 0, 3, 1});
  EXPECT_THAT(Run1(text, {a, b}, 0), ElementsAre(1, 0, 1, 0));
  auto s = Run1(text, {a, b}, 1);
  EXPECT_EQ(s[0], -3);
  EXPECT_EQ(s[1], 0);
  EXPECT_EQ(s[2], 2);
  EXPECT_EQ(s[3], 1);
  auto c = Run1(text, {a, b}, 2);
  EXPECT_EQ(c[0], -1);
  EXPECT_EQ(c[1], 0.5);
  EXPECT_EQ(c[2], 1);
}

TEST(Ops, WhileLoopCountsAndAccumulates) {
  const char* text = R"(
HloModule m
cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  f = f32[] convert(i1)
  a1 = f32[] add(a, f)
  ROOT t = (s32[], f32[]) tuple(i1, a1)
}
ENTRY e {
  z = s32[] constant(0)
  x = f32[] parameter(0)
  init = (s32[], f32[]) tuple(z, x)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {}, {100})}), ElementsAre(115));  // 100 + 1+2+3+4+5
}

TEST(Ops, ConditionalPredAndIndex) {
  const char* text = R"(
HloModule m
b0 {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
b1 {
  x = f32[] parameter(0)
  ROOT a = f32[] add(x, x)
}
b2 {
  x = f32[] parameter(0)
  ROOT c = f32[] constant(42)
}
ENTRY e {
  p = pred[] parameter(0)
  i = s32[] parameter(1)
  x = f32[] parameter(2)
  c1 = f32[] conditional(p, x, x), true_computation=b0, false_computation=b1
  c2 = f32[] conditional(i, x, x, x), branch_computations={b0, b1, b2}
  ROOT t = (f32[], f32[]) tuple(c1, c2)
})";
  auto x = Arr(F32, {}, {3});
  auto pt = Arr(PrimitiveType::PRED, {}, {1});
  auto pf = Arr(PrimitiveType::PRED, {}, {0});
  EXPECT_THAT(Run1(text, {pt, Arr(S32, {}, {1}), x}, 0), ElementsAre(-3));
  EXPECT_THAT(Run1(text, {pf, Arr(S32, {}, {1}), x}, 0), ElementsAre(6));
  EXPECT_THAT(Run1(text, {pf, Arr(S32, {}, {1}), x}, 1), ElementsAre(6));
  // Out-of-range branch index runs the last branch (XLA).
  EXPECT_THAT(Run1(text, {pf, Arr(S32, {}, {7}), x}, 1), ElementsAre(42));
  EXPECT_THAT(Run1(text, {pf, Arr(S32, {}, {-1}), x}, 1), ElementsAre(42));
}

TEST(Ops, CallSortCopyBitcast) {
  const char* text = R"(
HloModule m
sq {
  x = f32[3] parameter(0)
  ROOT m = f32[3] multiply(x, x)
}
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT l = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[3] parameter(0)
  c = f32[3] call(x), to_apply=sq
  s = f32[3] sort(x), dimensions={0}, to_apply=lt
  k = f32[3] copy(s)
  ROOT t = (f32[3], f32[3]) tuple(c, k)
})";
  auto x = Arr(F32, {3}, {3, -1, 2});
  EXPECT_THAT(Run1(text, {x}, 0), ElementsAre(9, 1, 4));
  EXPECT_THAT(Run1(text, {x}, 1), ElementsAre(-1, 2, 3));
}

TEST(Ops, PhysicalBitcastFollowsLayouts) {
  // x is [2,3] with layout {0,1} (column major): physical order is x00,x10,x01,x11,x02,x12.
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[6]{0} bitcast(x)
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {2, 3}, {1, 2, 3, 4, 5, 6})}), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(Ops, GatherRowsWithClampedIndices) {
  // Take rows 2, 0 and 5 (clamped to the last row, 3) of a [4,2] table.
  const char* text = R"(
HloModule m
ENTRY e {
  t = f32[4,2] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,2] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}), Arr(S32, {3, 1}, {2, 0, 5})}),
              ElementsAre(20, 21, 0, 1, 30, 31));
}

TEST(Ops, ScatterAddsRowsAndSkipsOutOfBounds) {
  // Add rows u0 -> row 1, u1 -> row 1 again, u2 -> row 9 (out of bounds: skipped) of a [3,2] table.
  const char* text = R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  t = f32[3,2] parameter(0)
  i = s32[3] parameter(1)
  u = f32[3,2] parameter(2)
  ROOT r = f32[3,2] scatter(t, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {3, 2}, {0, 1, 10, 11, 20, 21}), Arr(S32, {3}, {1, 1, 9}),
                          Arr(F32, {3, 2}, {1, 2, 100, 200, 5, 5})}),
              ElementsAre(0, 1, 111, 213, 20, 21));
}

TEST(Ops, UnsupportedOpcodeNamesInstruction) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fft(x), fft_type=FFT, fft_length={4}
})";
  auto out = RunWith(text, {Arr(F32, {4}, {1, 2, 3, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("fft"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'f'"));
}

TEST(Ops, UnknownCustomCallTargetIsAnError) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="MyTarget"
})";
  auto out = RunWith(text, {Arr(F32, {4}, {1, 2, 3, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("MyTarget"));
}

TEST(Ops, ShardingCustomCallIsIdentity) {
  const char* text = R"(
HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT c = f32[2] custom-call(x), custom_call_target="Sharding", sharding={replicated}
})";
  EXPECT_THAT(Run1(text, {Arr(F32, {2}, {1, 2})}), ElementsAre(1, 2));
}

}  // namespace
}  // namespace weave::eval
