#include "formats/tfrecord_reader.h"
