#include <algorithm>
#include <vector>

#include "msrun_ssh/base.h"

namespace msrun_ssh {

double upper_median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace msrun_ssh
