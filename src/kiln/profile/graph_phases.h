#pragma once
// Graph mode runs a training step as one compiled graph, which train::Model times as a single
// graph_step phase. The profiler splits it into eager mode's phases by what each launched node
// computes: forward (what the loss depends on), communication (collectives), optimizer update
// (nodes that write parameters or optimizer state in place) and backward (the rest: the
// gradients). This happens once, after profiling, from the launches' times: nothing is added to
// the step while it runs.
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/profile/collection.h"

namespace kiln::profile {

// Per node of a training graph (by id), its phase; the graph's first output is the loss.
// graph_step for dead nodes and for every node of a graph without outputs.
std::vector<train::StepPhase> node_phases(const graph::Graph& graph);

// Replaces each graph_step phase of `collection` that holds graph launches by consecutive
// phases, a new one where a launch of another phase begins, which together span the graph_step
// exactly (so the phases still make up the step). A launch of no known phase continues the
// phase before it; where several threads launched, the training loop's (thread 0, where the
// phases are drawn) is followed, or without its launches the one that launched the most.
void split_graph_steps(Collection& collection);

}  // namespace kiln::profile
