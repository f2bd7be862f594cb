"""Writes the bench data set's TFRecord shards out again as WebDataset tar shards (one per
shard, members <key>.jpg and <key>.cls, the same JPEG bytes) and as an image folder
(<class>/<key>.jpg), for tests/bench/sources.sh. Run with build/venv's python (TensorFlow reads
the shards).

    export_sources.py SHARD_GLOB TAR_DIR FOLDER_DIR
"""
import glob
import io
import os
import sys
import tarfile

import tensorflow as tf


def main(pattern, tar_dir, folder_dir):
    os.makedirs(tar_dir, exist_ok=True)
    shards = sorted(glob.glob(pattern))
    if not shards:
        sys.exit("export_sources: no file matches %s" % pattern)
    for n, shard in enumerate(shards):
        tar_path = os.path.join(tar_dir, "train-%05d.tar" % n)
        tmp = tar_path + ".partial"
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, record in enumerate(tf.data.TFRecordDataset(shard)):
                f = tf.train.Example.FromString(record.numpy()).features.feature
                jpeg = f["image/encoded"].bytes_list.value[0]
                label = f["image/class/label"].int64_list.value[0]
                key = "s%02d-%06d" % (n, i)
                for name, data in ((key + ".jpg", jpeg), (key + ".cls", b"%d" % label)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                folder = os.path.join(folder_dir, "class%03d" % label)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, key + ".jpg"), "wb") as out:
                    out.write(jpeg)
        os.replace(tmp, tar_path)  # a run cut short leaves no half-written shard behind


if __name__ == "__main__":
    main(*sys.argv[1:])
