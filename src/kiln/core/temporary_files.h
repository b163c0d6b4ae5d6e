#pragma once
// Files written atomically are filled under a hidden temporary name beside their final one and
// renamed into place when complete. A writer killed mid-write leaves its temporary behind; these
// name the temporaries and remove those whose writer is gone, so a folder's litter never grows
// across restarts. Checkpoints, profile reports, ONNX models and the machine peaks cache use them.
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// The temporary this process fills for `final_path`: ".<name><marker><pid>" in the same folder
// (a rename within one file system is atomic).
std::string temporary_path(const std::string& final_path, std::string_view marker = ".tmp-");

// Deletes the files in `directory` named ".<name><marker><pid>" whose process no longer runs, or
// is this one (which is not filling them while it cleans up). With `name` given, only the
// temporaries of that final file name; otherwise those of any name. A live writer's file is left
// alone, and a folder that cannot be read removes nothing. Returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& directory,
                                                  std::string_view marker = ".tmp-",
                                                  std::string_view name = {});

// remove_stale_temporaries for the temporaries of `final_path` alone, in its folder.
std::vector<std::string> remove_stale_temporaries_of(const std::string& final_path,
                                                     std::string_view marker = ".tmp-");

}  // namespace kiln
