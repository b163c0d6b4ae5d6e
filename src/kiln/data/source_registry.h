#pragma once
// Named source factories, so a source can be given as text ("fashion-mnist:train",
// "imagefolder:/data/train", "record:a.kiln,b.kiln") by the CLI and by config files.
//
// data/ registers fashion-mnist, mnist and imagefolder itself. Folders above data/ add theirs with
// register_source_factory(); record/ registers "record". kiln_record is a static library, so a
// registrar object in a .cpp that nothing else references is dropped by the linker: register from a
// function the program calls (kiln::record::register_sources(), say) or from the same .cpp as a
// symbol the program uses.
#include <functional>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::dataset {

// `arg` is the text after "scheme:" (empty when there is none).
using SourceFactory = std::function<Dataset(const std::string& arg, const SourceOptions& options)>;

// Replaces any factory of the same scheme. Thread-safe.
void register_source_factory(const std::string& scheme, SourceFactory factory,
                             std::string help = "");
bool has_source_factory(const std::string& scheme);
// "scheme   help" lines, for --help texts.
std::vector<std::string> registered_sources();

// Builds the source that `spec` ("scheme" or "scheme:arg") names; the error for an unknown scheme
// lists the known ones.
Dataset make_source(const std::string& spec, const SourceOptions& options = {});

}  // namespace kiln::dataset
