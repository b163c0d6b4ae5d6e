#pragma once
// The report page itself: sections, tables and SVG charts drawn from the summed-up profile.
#include <string>
#include <vector>

#include "kiln/profile/profile_data.h"
#include "kiln/profile/recommendations.h"

namespace kiln::profile {

// `graph_svg`: the last compiled graph drawn by Graphviz (empty: shown as text).
std::string render_report_html(const ProfileData& data,
                               const std::vector<Recommendation>& recommendations,
                               const std::string& graph_svg);

}  // namespace kiln::profile
