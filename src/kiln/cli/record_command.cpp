#include "kiln/cli/record_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/data/record_converters.h"
#include "kiln/data/record_dataset.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/verify.h"

namespace kiln::cli {
namespace {
using namespace kiln::record;

struct ShardInfo {
  std::string path;
  bool present = false;
  std::string error;  // set when present but unreadable
  std::shared_ptr<ShardReader> reader;
};

std::vector<ShardInfo> shard_infos(const std::shared_ptr<ShardReader>& first) {
  std::vector<ShardInfo> infos;
  auto paths = RecordReader::sibling_paths(*first);
  for (size_t i = 0; i < paths.size(); ++i) {
    ShardInfo s;
    s.path = paths[i];
    if (i == first->header().shard_index) {
      s.present = true;
      s.reader = first;
    } else {
      struct stat st {};
      s.present = ::stat(s.path.c_str(), &st) == 0;
      if (s.present) {
        try {
          s.reader = ShardReader::open(s.path);
        } catch (const Error& e) {
          s.error = e.what();
        }
      }
    }
    infos.push_back(std::move(s));
  }
  return infos;
}

// A terminal progress line on stderr, redrawn in place; nothing when stderr is not a terminal.
std::function<void(const ConvertProgress&)> terminal_progress() {
  if (!::isatty(STDERR_FILENO)) return nullptr;
  return [](const ConvertProgress& p) {
    std::fprintf(stderr, "\r\033[K%s", format_progress(p).c_str());
    if (p.rows_done == p.rows_total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void print_result(const ConvertResult& r) {
  std::cout << "wrote " << r.rows << " rows to " << r.files.size() << " file"
            << (r.files.size() == 1 ? "" : "s") << " in " << std::fixed << std::setprecision(2)
            << r.seconds << " s (" << std::setprecision(0)
            << (r.seconds > 0 ? double(r.rows) / r.seconds : 0.0) << " rows/s):";
  for (const auto& f : r.files) std::cout << " " << f;
  std::cout << "\n";
}

}  // namespace

std::string record_info_text(const std::string& file) {
  auto first = ShardReader::open(file);
  const Header& h = first->header();
  std::ostringstream out;
  out << "record file " << file << " (shard " << h.shard_index << " of " << h.shard_count << ")\n"
      << "format version " << h.version << ", set id " << std::hex << std::setw(16)
      << std::setfill('0') << h.dataset_id << std::dec << std::setfill(' ') << ", page size "
      << h.page_size << " bytes\n"
      << "rows: " << h.total_rows << " in the set, " << h.row_count << " in this file\n"
      << "schema (" << first->schema().size() << " fields):\n"
      << first->schema().str() << "shards:\n";
  size_t missing = 0;
  for (const ShardInfo& s : shard_infos(first)) {
    out << "  " << std::left << std::setw(40) << s.path << std::right;
    if (!s.present) {
      out << "  MISSING\n";
      ++missing;
    } else if (!s.reader) {
      out << "  UNREADABLE: " << s.error << "\n";
    } else {
      const Header& sh = s.reader->header();
      out << "  " << std::setw(10) << sh.row_count << " rows  " << std::setw(7) << sh.data.count
          << " pages  " << std::setw(12) << sh.file_size << " bytes";
      if (sh.dataset_id != h.dataset_id)
        out << "  OTHER SET (id " << std::hex << sh.dataset_id << std::dec << ")";
      out << "\n";
    }
  }
  if (missing) out << missing << " of " << h.shard_count << " shards are missing\n";
  return out.str();
}

std::string record_info_json(const std::string& file) {
  auto first = ShardReader::open(file);
  const Header& h = first->header();
  nlohmann::ordered_json j;
  j["file"] = file;
  j["version"] = h.version;
  std::ostringstream id;
  id << std::hex << std::setw(16) << std::setfill('0') << h.dataset_id;
  j["set_id"] = id.str();
  j["page_size"] = h.page_size;
  j["total_rows"] = h.total_rows;
  j["schema"] = nlohmann::ordered_json::array();
  for (const Field& f : first->schema().fields()) {
    nlohmann::ordered_json jf;
    jf["name"] = f.name;
    jf["type"] = field_type_name(f.type);
    if (f.type == FieldType::ndarray) {
      jf["elem"] = elem_type_name(f.elem);
      jf["shape"] = f.shape;
    }
    jf["indexed"] = f.indexed;
    j["schema"].push_back(jf);
  }
  j["shards"] = nlohmann::ordered_json::array();
  for (const ShardInfo& s : shard_infos(first)) {
    nlohmann::ordered_json js;
    js["file"] = s.path;
    js["present"] = s.present;
    if (s.reader) {
      js["rows"] = s.reader->header().row_count;
      js["pages"] = s.reader->header().data.count;
      js["bytes"] = s.reader->header().file_size;
    } else if (s.present) {
      js["error"] = s.error;
    }
    j["shards"].push_back(js);
  }
  return j.dump(2) + "\n";
}

int run_record_verify(const std::vector<std::string>& files, std::ostream& out, bool quiet) {
  bool all_ok = true;
  for (const std::string& file : files) {
    VerifyReport report = verify_records(file);
    all_ok = all_ok && report.ok();
    if (!quiet)
      for (const std::string& p : report.problems) out << "  " << p << "\n";
    if (report.ok()) {
      out << file << ": OK (" << report.files.size() << " shard file"
          << (report.files.size() == 1 ? "" : "s") << ", " << report.rows_checked << " rows, "
          << report.pages_checked << " pages checked)\n";
    } else {
      out << file << ": DAMAGED (" << report.problem_count << " problem"
          << (report.problem_count == 1 ? "" : "s");
      if (report.problem_count > report.problems.size())
        out << ", first " << report.problems.size() << " shown";
      out << ")\n";
    }
  }
  return all_ok ? 0 : 1;
}

void add_convert_command(CLI::App& app) {
  auto* convert = app.add_subcommand("convert", "Convert a data set into record files");
  convert->require_subcommand(1);

  struct Common {
    int shards = 1;
    bool overwrite = false;
    uint32_t page_size = kDefaultPageSize;
  };
  auto common = std::make_shared<Common>();
  auto add_common = [common](CLI::App* cmd) {
    cmd->add_option("--shards", common->shards, "Number of shard files")
        ->check(CLI::Range(1, int(kMaxShards)));
    cmd->add_flag("--overwrite", common->overwrite, "Replace existing files");
    cmd->add_option("--page-size", common->page_size, "Page size in bytes (power of two)");
  };

  struct FolderArgs {
    std::string dir, out;
    int threads = 2;
  };
  auto folder = std::make_shared<FolderArgs>();
  auto* imagefolder = convert->add_subcommand(
      "imagefolder", "DIR/<class>/<image> -> rows {label int32, image bytes, file_name string}");
  imagefolder->add_option("DIR", folder->dir, "Image folder (one sub-folder per class)")
      ->required()
      ->check(CLI::ExistingDirectory);
  imagefolder->add_option("OUT", folder->out, "Output file (OUT0, OUT1, ... with --shards > 1)")
      ->required();
  imagefolder->add_option("--threads", folder->threads, "Threads reading the image files")
      ->check(CLI::Range(1, 64));
  add_common(imagefolder);
  imagefolder->callback([folder, common] {
    ConvertOptions o{.shards = common->shards,
                     .overwrite = common->overwrite,
                     .page_size = common->page_size,
                     .reader_threads = folder->threads,
                     .progress = terminal_progress()};
    print_result(convert_image_folder(folder->dir, folder->out, o));
  });

  struct IdxArgs {
    std::string images, labels, out;
    bool png = false;
  };
  auto idx = std::make_shared<IdxArgs>();
  auto* idx_cmd = convert->add_subcommand(
      "idx", "MNIST/Fashion-MNIST IDX files -> rows {label int32, image uint8[rows, cols]}");
  idx_cmd->add_option("IMAGES", idx->images, "images IDX file (.gz or plain)")
      ->required()
      ->check(CLI::ExistingFile);
  idx_cmd->add_option("LABELS", idx->labels, "labels IDX file (.gz or plain)")
      ->required()
      ->check(CLI::ExistingFile);
  idx_cmd->add_option("OUT", idx->out, "Output file (OUT0, OUT1, ... with --shards > 1)")
      ->required();
  idx_cmd->add_flag("--png", idx->png, "Store images as PNG bytes instead of raw uint8 arrays");
  add_common(idx_cmd);
  idx_cmd->callback([idx, common] {
    ConvertOptions o{.shards = common->shards,
                     .overwrite = common->overwrite,
                     .page_size = common->page_size,
                     .png = idx->png,
                     .progress = terminal_progress()};
    print_result(convert_idx(idx->images, idx->labels, idx->out, o));
  });
}

void add_record_command(CLI::App& app) {
  auto* record = app.add_subcommand("record", "Inspect and check record files");
  record->require_subcommand(1);

  struct InfoArgs {
    std::string file;
    bool json = false;
  };
  auto info_args = std::make_shared<InfoArgs>();
  auto* info = record->add_subcommand("info", "Schema, rows, pages and shard list of a record set");
  info->add_option("FILE", info_args->file, "A shard file of the set")->required();
  info->add_flag("--json", info_args->json, "Print JSON");
  info->callback([info_args] {
    std::cout << (info_args->json ? record_info_json(info_args->file)
                                  : record_info_text(info_args->file));
  });

  struct VerifyArgs {
    std::vector<std::string> files;
    bool quiet = false;
  };
  auto verify_args = std::make_shared<VerifyArgs>();
  auto* verify = record->add_subcommand(
      "verify",
      "Check every checksum, page and index entry of record sets. Exit status: 0 whole, 1 "
      "damaged or incomplete, 2 usage error");
  verify->add_option("FILE", verify_args->files, "Shard files (each checks its whole set)")
      ->required();
  verify->add_flag("-q,--quiet", verify_args->quiet, "Only the summary line per file");
  verify->callback([verify_args] {
    int status = run_record_verify(verify_args->files, std::cout, verify_args->quiet);
    if (status != 0) {
      // main() maps every CLI exception to status 2 ("usage error"); a damaged file must be
      // told apart from a bad command line, so leave with status 1 directly.
      std::cout.flush();
      std::cerr.flush();
      std::exit(status);
    }
  });
}

}  // namespace kiln::cli
