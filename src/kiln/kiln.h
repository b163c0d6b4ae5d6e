#pragma once
// Everything a program that trains with Kiln uses, in one include:
//
//   #include <kiln/kiln.h>
//   auto net = kiln::models::create("lenet", {.num_classes = 3, .in_channels = 3});
//
// Link Kiln::kiln (CMake: find_package(Kiln)) or `pkg-config --cflags --libs kiln`.
#include "kiln/amp/level.h"
#include "kiln/amp/loss_scale.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/core/threads.h"
#include "kiln/data/dataset.h"
#include "kiln/data/presets.h"
#include "kiln/data/record_dataset.h"
#include "kiln/data/text_dataset.h"
#include "kiln/data/vision.h"
#include "kiln/models/gpt.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/nn.h"
#include "kiln/onnx/export.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_schedule.h"
#include "kiln/optim/momentum.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/metrics.h"
#include "kiln/train/model.h"
