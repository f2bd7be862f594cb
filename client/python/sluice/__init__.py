"""Sluice: ready image batches from `sluice serve`, as numpy arrays, PyTorch tensors or tf.data.

    import sluice
    client = sluice.Client("127.0.0.1:50051")
    for images, labels, position in client.stream("train", batch_size=256, image_size=224):
        ...  # images: uint8 [256, 224, 224, 3]; labels: int32 [256]

Several servers (a list, "host1:port,host2:port", or a "dns:///host:port" name with several
addresses) fan in: one stream per server, every server's batches in one iteration; a sharded
dataset must be served whole (every --shard I/N), else SluiceError FAILED_PRECONDITION. Failures
(reconnects, epochs with many skipped records) are logged on the "sluice" logger.

A dataset's transform sets (DatasetInfo.transform_sets) are chosen by name: stream(...,
transform_set="bf16") delivers that set's output (float16, bfloat16 or float32 images, NCHW, mixed
labels: see Batch); sluice.transforms([...]) writes a transform list for a server config.

A dataset's features (PipelineOptions.features, boxes) come in Batch.features, {name: array}, a
ragged one (boxes, a list feature) as a sluice.Ragged; an unlabeled dataset's batches have labels
None.

sluice.tune_malloc() makes glibc keep freed memory for the next batches (faster; process-wide).
sluice.torch.SluiceDataset and sluice.tf.dataset adapt streams to PyTorch and tf.data; they import
their framework when imported themselves, so `import sluice` needs neither.
"""
from sluice._client import BatchStream, Client, StreamPlan
from sluice._errors import SluiceError
from sluice._malloc import tune_malloc
from sluice._transforms import transforms
from sluice._wire import Batch, Position, Ragged, decode_batch, soft_labels

__version__ = "0.1.0"
__all__ = ["Batch", "BatchStream", "Client", "Position", "Ragged", "SluiceError", "StreamPlan",
           "decode_batch", "soft_labels", "transforms", "tune_malloc"]
