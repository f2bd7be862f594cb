#include "formats/tfrecord_writer.h"
