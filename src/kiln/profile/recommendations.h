#pragma once
// Advice computed from the measurements, in the spirit of MindSpore's performance guide: each
// rule fires only when the profile shows the problem it addresses, and says what was measured.
#include <string>
#include <vector>

#include "kiln/profile/profile_data.h"

namespace kiln::profile {

struct Recommendation {
  std::string title;   // what to do
  std::string reason;  // the measurement behind it
};

// Above this share of the step, waiting for data is worth fixing (the guide's threshold).
inline constexpr double kDataWaitShare = 0.10;

std::vector<Recommendation> recommend(const ProfileData& data);

}  // namespace kiln::profile
