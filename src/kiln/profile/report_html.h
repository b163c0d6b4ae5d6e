#pragma once
// The report page itself: sections, tables and SVG charts drawn from the summed-up profile.
#include <string>
#include <vector>

#include "kiln/profile/profile_data.h"
#include "kiln/profile/recommendations.h"

namespace kiln::profile {

// The last compiled graph before and after the passes, drawn by Graphviz (empty: shown as text).
struct GraphDrawings {
  std::string traced_svg, compiled_svg;
};

std::string render_report_html(const ProfileData& data,
                               const std::vector<Recommendation>& recommendations,
                               const GraphDrawings& graphs);

}  // namespace kiln::profile
