// Where the random program generator (program_gen.h) takes its decisions from.
//
// Every decision is one bounded draw `Below(n)` in [0, n). Three sources:
//  - SeededChoices: a PRNG (splitmix64) from a 64-bit seed; records every draw (the trace);
//  - ReplayChoices: replays a recorded trace, clamping each value to the bound of the draw
//    (min(v, n-1)) and returning 0 once the trace runs out. Shrinking a trace (deleting draws,
//    lowering values) therefore gives a smaller program: the reducer's first stage
//    (reducer.h) is delta debugging over this trace, in the manner of Hypothesis' shrinker;
//  - ByteChoices: libFuzzer's bytes, little-endian, as many bytes per draw as n needs, 0 once
//    the bytes run out (fuzz/pipeline_fuzzer.cc).
// The generator is written so that draw value 0 is always the simplest option, and so that an
// all-zero trace is a small valid program that windows one all-gather matmul.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace weave::fuzz {

class ChoiceSource {
 public:
  virtual ~ChoiceSource() = default;
  // A value in [0, n); n <= 1 gives 0 without consuming anything.
  uint64_t Below(uint64_t n) {
    if (n <= 1) return 0;
    uint64_t v = Draw(n);
    if (v >= n) v = n - 1;
    trace_.push_back(v);
    return v;
  }
  // A value in [lo, hi] (hi >= lo).
  int64_t Range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }
  // True with probability about percent/100; false is the simple answer (draw 0).
  bool Percent(int percent) { return Below(100) >= static_cast<uint64_t>(100 - percent); }
  // An index into `weights`, with probability proportional to the weight. Index 0 is the
  // answer of a zero draw, so list the simplest option first.
  size_t Weighted(std::initializer_list<int> weights) {
    int total = 0;
    for (int w : weights) total += w;
    uint64_t v = Below(static_cast<uint64_t>(total));
    size_t i = 0;
    for (int w : weights) {
      if (v < static_cast<uint64_t>(w)) return i;
      v -= static_cast<uint64_t>(w);
      ++i;
    }
    return 0;
  }
  template <typename T>
  const T& Pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(Below(items.size()))];
  }
  // Fisher-Yates shuffle; zero draws keep the order.
  template <typename T>
  void Shuffle(std::vector<T>& items) {
    for (size_t i = 0; i + 1 < items.size(); ++i) {
      size_t j = i + static_cast<size_t>(Below(items.size() - i));
      std::swap(items[i], items[j]);
    }
  }
  // Every value drawn so far, clamped to its bound: replaying it gives the same program.
  const std::vector<uint64_t>& trace() const { return trace_; }

 protected:
  // A raw value; values >= n are clamped to n - 1 by Below.
  virtual uint64_t Draw(uint64_t n) = 0;

 private:
  std::vector<uint64_t> trace_;
};

class SeededChoices : public ChoiceSource {
 public:
  explicit SeededChoices(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}

 protected:
  uint64_t Draw(uint64_t n) override {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % n;
  }

 private:
  uint64_t state_;
};

class ReplayChoices : public ChoiceSource {
 public:
  explicit ReplayChoices(std::vector<uint64_t> values) : values_(std::move(values)) {}

 protected:
  uint64_t Draw(uint64_t n) override {
    if (pos_ >= values_.size()) return 0;
    uint64_t v = values_[pos_++];
    return v < n ? v : n - 1;
  }

 private:
  std::vector<uint64_t> values_;
  size_t pos_ = 0;
};

class ByteChoices : public ChoiceSource {
 public:
  ByteChoices(const uint8_t* data, size_t size) : data_(data), size_(size) {}

 protected:
  uint64_t Draw(uint64_t n) override {
    uint64_t v = 0;
    int shift = 0;
    for (uint64_t range = n - 1; range > 0; range >>= 8, shift += 8) {
      const uint64_t byte = pos_ < size_ ? data_[pos_++] : 0;
      v |= byte << shift;
    }
    return v % n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace weave::fuzz
