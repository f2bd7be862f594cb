#include "formats/compression.h"
