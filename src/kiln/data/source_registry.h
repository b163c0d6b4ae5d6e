#pragma once
// Named source factories, so a source can be given as text ("fashion-mnist:train",
// "imagefolder:/data/train", "record:a.kiln,b.kiln") by the CLI and by config files.
//
// The built-in sources (fashion-mnist, mnist, imagefolder, record) are listed in
// source_registry.cpp. Code above data/ adds its own with register_source_factory(), called
// explicitly before the first make_source (never from a static initializer: what a static library
// registers that way depends on what the linker keeps).
#include <functional>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

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

}  // namespace kiln::data
