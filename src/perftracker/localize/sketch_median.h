// SketchMedian: QuantileSketch::Quantile(0.5) with memoized bucket values (std::pow per call
// was a tenth of the localizer's ingest time at 30 M records). Same semantics as Quantile():
// the value of the bucket holding rank floor(0.5 * (count - 1)), clamped to [min, max].
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/summary/quantile_sketch.h"

namespace perftracker::localize {

class SketchMedian {
 public:
  double operator()(const QuantileSketch& s);

 private:
  static constexpr int32_t kLow = -1024;  // bucket values ~1e-18 ns
  static constexpr int32_t kHigh = 2048;  // ~1e35 ns
  double Value(int32_t index);

  std::vector<double> cache_;
};

}  // namespace perftracker::localize
