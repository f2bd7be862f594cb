"""tf.data adapter: ready batches from `sluice serve` as a tf.data.Dataset.

    ds = sluice.tf.dataset("127.0.0.1:50051", "train", batch_size=256, image_size=224)
    model.fit(ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255, y)), steps_per_epoch=1000)

Elements are (images, labels): uint8 [N, H, W, 3] (NHWC, RGB) and int32 [N]. Each iteration of
the dataset opens its own stream.
"""
import tensorflow as tf

from sluice._client import Client, image_hw


def output_signature(image_size):
    """The element spec of dataset(): N is unknown (a last partial batch is smaller)."""
    height, width = image_hw(image_size)
    return (tf.TensorSpec(shape=(None, height, width, 3), dtype=tf.uint8),
            tf.TensorSpec(shape=(None,), dtype=tf.int32))


def dataset(target, dataset, batch_size, image_size, mode=None, seed=None, epochs=None,
            shard=None, job_name=None, start_position=None, drop_remainder=None, prefetch=2,
            token=None, root_certificates=None):
    """A tf.data.Dataset of (images, labels) batches of `dataset` served at `target`.

    image_size (N or (height, width)) is required: it fixes the output signature. batch_size may
    be None for the dataset's default. Other arguments are Client.stream()'s and Client's;
    `prefetch` batches are read ahead by the client and as many again by tf.data.
    Errors (e.g. SluiceError NOT_FOUND for an unknown dataset) surface when the dataset is
    iterated, as tf.errors with the server's message.
    """
    if image_size is None:
        raise ValueError("sluice.tf.dataset needs image_size: it fixes the output signature")
    height, width = image_hw(image_size)

    def batches():
        with Client(target, token=token, root_certificates=root_certificates) as client:
            with client.stream(dataset, batch_size=batch_size, image_size=(height, width),
                               mode=mode, seed=seed, epochs=epochs, shard=shard,
                               job_name=job_name, start_position=start_position,
                               drop_remainder=drop_remainder, prefetch=prefetch) as stream:
                for images, labels, _ in stream:
                    yield images, labels

    ds = tf.data.Dataset.from_generator(batches, output_signature=output_signature((height, width)))
    return ds.prefetch(prefetch)
