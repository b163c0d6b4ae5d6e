#pragma once
// Everything in kiln::nn, for user code and examples.
#include "kiln/nn/activation.h"
#include "kiln/nn/basic.h"
#include "kiln/nn/cell.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/initializer.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/normalization.h"
#include "kiln/nn/pooling.h"
