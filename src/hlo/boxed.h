// Boxed<T>: an optional T kept on the heap, with std::optional's interface (has_value, *, ->,
// emplace, reset, = nullopt, ==). HloInstruction holds its large, rarely present attributes this
// way (a constant's literal, a sharding, replica groups): one pointer (8 bytes) in every
// instruction instead of the whole value (150-260 bytes each), so a pass walking a large module
// touches fewer cache lines. Copies are deep, like std::optional's. The attributes that read as
// empty when absent (a dot's dimension numbers, a slice's bounds) use value_or_empty() and
// ensure(): absent and present-but-empty mean the same.
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace weave {

template <typename T>
class Boxed {
 public:
  Boxed() = default;
  Boxed(std::nullopt_t) {}  // NOLINT(google-explicit-constructor): as std::optional
  Boxed(const T& v) : p_(std::make_unique<T>(v)) {}  // NOLINT
  Boxed(T&& v) : p_(std::make_unique<T>(std::move(v))) {}  // NOLINT
  Boxed(const std::optional<T>& o) : p_(o ? std::make_unique<T>(*o) : nullptr) {}  // NOLINT
  Boxed(const Boxed& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Boxed(Boxed&&) noexcept = default;
  ~Boxed() = default;

  Boxed& operator=(const Boxed& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  Boxed& operator=(std::nullopt_t) {
    p_.reset();
    return *this;
  }
  Boxed& operator=(const T& v) {
    p_ = std::make_unique<T>(v);
    return *this;
  }
  Boxed& operator=(T&& v) {
    p_ = std::make_unique<T>(std::move(v));
    return *this;
  }
  Boxed& operator=(const std::optional<T>& o) {
    p_ = o ? std::make_unique<T>(*o) : nullptr;
    return *this;
  }

  bool has_value() const { return p_ != nullptr; }
  explicit operator bool() const { return p_ != nullptr; }
  // As with std::optional's operator*, the value must be present.
  T& operator*() { return *p_; }
  const T& operator*() const { return *p_; }
  T* operator->() { return p_.get(); }
  const T* operator->() const { return p_.get(); }
  T& value() { return *p_; }
  const T& value() const { return *p_; }
  template <typename... Args>
  T& emplace(Args&&... args) {
    p_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *p_;
  }
  void reset() { p_.reset(); }
  // The value, or T{} when absent (a shared empty value: never allocates).
  const T& value_or_empty() const {
    static const T* const kEmpty = new T();
    return p_ ? *p_ : *kEmpty;
  }
  // The value, made present (as T{}) first if absent.
  T& ensure() {
    if (!p_) p_ = std::make_unique<T>();
    return *p_;
  }
  operator std::optional<T>() const {  // NOLINT(google-explicit-constructor)
    return p_ ? std::optional<T>(*p_) : std::nullopt;
  }

  friend bool operator==(const Boxed& a, const Boxed& b) {
    if (!a.p_ || !b.p_) return !a.p_ && !b.p_;
    return *a.p_ == *b.p_;
  }
  friend bool operator==(const Boxed& a, std::nullopt_t) { return !a.p_; }

 private:
  std::unique_ptr<T> p_;
};

}  // namespace weave
