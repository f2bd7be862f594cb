#include "formats/record_index.h"
