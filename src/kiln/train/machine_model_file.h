#pragma once
// The figures AUTO_PARALLEL plans with on this machine (parallel/machine_model.h): its measured
// peaks (ops/machine_peaks.h), and the collectives' α-β model from the file that
// `kiln bench comm` writes (the defaults where it has not run). Under MPI every rank plans with
// rank 0's figures, so that all ranks choose the same plan.
#include <filesystem>
#include <optional>
#include <string>

#include "kiln/parallel/machine_model.h"

namespace kiln::train {

// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln; then "comm-model.json".
std::filesystem::path comm_model_path();
// Writes the model atomically (a temporary file renamed over the old one). Throws FileError.
void save_comm_model(const parallel::CommCostModel& model, const std::string& description,
                     const std::filesystem::path& path = comm_model_path());
// The saved model and its description, or nullopt when there is no file. Throws FileError
// naming the file and the field for a file that is not one `save_comm_model` wrote.
std::optional<std::pair<parallel::CommCostModel, std::string>> load_comm_model(
    const std::filesystem::path& path = comm_model_path());

// The model to plan with: rank 0's peaks and saved α-β figures, the same on
// every rank (every rank must call it, in the same order, when the job has several), with the
// process's measured op times when `measure_ops` (parallel/measured_op_times.h).
parallel::MachineModel planning_machine_model(bool measure_ops);

}  // namespace kiln::train
