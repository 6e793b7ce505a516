#pragma once
// --only: run a subset of a case's points, e.g. to repeat the points where two libraries differ
// without sweeping the whole case again:
//   --only scope=block --only variant=uni --only ctas=4,132 --only size=65536..2097152
// Each --only names one axis and the values it may take (a comma-separated list; a numeric axis
// also takes an inclusive range LO..HI, and compares as a number, so 04 is 4). A point runs when
// every named axis takes one of its values; an axis may be named once. Points filtered out are not
// run and leave no row (not even a "skipped" one). Text values are not checked against the case's
// names, so the harness warns when a filter matched no point at all.
//
// Host-only and CUDA-free, so it is unit-tested on the host (tests/host/bench_filter_test.cpp).

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

class point_filter {
 public:
  /// The axes a filter may name: the row fields that tell a case's points apart.
  static constexpr std::string_view axes[] = {"variant", "scope", "transport", "ctas", "threads", "npes", "size"};

  /// Adds one KEY=VALUES clause; throws std::invalid_argument naming what is wrong with it.
  void add(std::string const& clause) {
    auto const eq = clause.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == clause.size())
      throw std::invalid_argument("--only " + clause + ": expected AXIS=VALUE[,VALUE...]");
    std::string const key = clause.substr(0, eq);
    if (!known_axis(key))
      throw std::invalid_argument("--only " + clause + ": unknown axis '" + key + "'" + axes_hint());
    for (auto const& c : conditions_)
      if (c.key == key)
        throw std::invalid_argument("--only " + clause + ": axis '" + key +
                                    "' named twice; list its values in one --only, separated by commas");
    condition c{key, {}};
    std::size_t begin = eq + 1;
    while (begin <= clause.size()) {
      std::size_t end = clause.find(',', begin);
      if (end == std::string::npos) end = clause.size();
      std::string const value = clause.substr(begin, end - begin);
      if (value.empty()) throw std::invalid_argument("--only " + clause + ": empty value");
      c.values.push_back(parse_value(clause, key, value));
      begin = end + 1;
    }
    conditions_.push_back(std::move(c));
  }

  bool empty() const { return conditions_.empty(); }

  /// Whether a point passes: `field(key)` gives the point's value of that axis as text.
  template <class Field>
  bool accepts(Field&& field) const {
    for (auto const& c : conditions_) {
      std::string const actual = field(c.key);
      bool any = false;
      for (auto const& v : c.values) any = any || v.matches(actual);
      if (!any) return false;
    }
    return true;
  }

 private:
  struct value {
    std::string text;           // a text axis's value; empty for a numeric axis
    unsigned long long lo = 0;  // a numeric axis's inclusive range (lo == hi for one number)
    unsigned long long hi = 0;
    bool matches(std::string const& actual) const {
      if (!text.empty()) return actual == text;
      unsigned long long n = 0;
      return parse_number(actual, n) && lo <= n && n <= hi;
    }
  };
  struct condition {
    std::string key;
    std::vector<value> values;
  };

  static bool numeric_axis(std::string_view key) { return key != "variant" && key != "scope" && key != "transport"; }
  static bool known_axis(std::string_view key) {
    for (auto a : axes)
      if (a == key) return true;
    return false;
  }
  static std::string axes_hint() {
    std::string s = " (axes:";
    for (auto a : axes) (s += ' ') += a;
    return s + ")";
  }

  static bool parse_number(std::string const& s, unsigned long long& out) {
    if (s.empty() || s.size() > 19) return false;
    unsigned long long n = 0;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;
      n = n * 10 + static_cast<unsigned>(ch - '0');
    }
    out = n;
    return true;
  }

  static value parse_value(std::string const& clause, std::string const& key, std::string const& text) {
    auto const dots = text.find("..");
    if (!numeric_axis(key)) {
      if (dots != std::string::npos)
        throw std::invalid_argument("--only " + clause + ": a range needs a numeric axis, and " + key + " is not");
      return {text};
    }
    value v;
    if (dots == std::string::npos) {
      if (!parse_number(text, v.lo))
        throw std::invalid_argument("--only " + clause + ": '" + text + "' is not a number (" + key + " is numeric)");
      v.hi = v.lo;
      return v;
    }
    if (!parse_number(text.substr(0, dots), v.lo) || !parse_number(text.substr(dots + 2), v.hi) || v.lo > v.hi)
      throw std::invalid_argument("--only " + clause + ": '" + text + "' is not a range LO..HI with LO <= HI");
    return v;
  }

  std::vector<condition> conditions_;
};

}  // namespace bench
