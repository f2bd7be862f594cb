"""Shared by the Python client tests (test_client.py, test_client_frameworks.py): a synthetic
data set served by a real `sluice serve` child process, a client on it, and helpers to compare
batches. conftest.py exposes the fixtures, so one server serves every module of a session.
"""
import hashlib
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

PHOTOS = Path("/usr/share/backgrounds/mate/nature")
IMAGES = 200   # in the test set: 4 shards, 4 classes
SIZE = 64      # the datasets' default image size


@pytest.fixture(scope="session")
def data_dir(sluice_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("client-data")
    args = [sluice_bin, "synth", "--images", str(IMAGES), "--classes", "4", "--shards", "4",
            "--seed", "3", "--out", str(out)]
    if PHOTOS.is_dir():
        args += ["--photos", str(PHOTOS)]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    return out


class Server:
    """A `sluice serve --config` child process; port 0 picks a free port, kept across restarts.
    args: more command-line flags (e.g. "--shard", "0/2"); host: the IPv4 address it listens on.
    """

    def __init__(self, sluice_bin, workdir, data, args=(), host="127.0.0.1"):
        self.host = host
        self.sluice_bin = sluice_bin
        self.workdir = Path(workdir)
        self.data = data
        self.args = list(args)
        self.port = 0
        self.proc = None
        self.start()

    def config(self):
        return f"""
listen: "{self.host}:{self.port}"
threads: 2
{self.datasets()}"""

    def datasets(self):
        """The config's datasets: "train" at most 64 images a batch, and "ordered" (one epoch of
        the same files in file order)."""
        return self.train_dataset("  limits { max_batch_size: 64 }\n") + f"""datasets {{
  name: "ordered"
  pipeline {{
    {self.files} mode: MODE_EVAL batch_size: 16 image_height: {SIZE} epochs: 1
    no_shuffle_files: true interleave {{ cycle_length: 1 }}
  }}
}}
"""

    def train_dataset(self, extra):
        """The dataset "train" (4 classes, shuffled batches of 16 at SIZE), with `extra` (config
        text, each line indented and ended) in its block."""
        return f"""datasets {{
  name: "train"
  num_classes: 4
  pipeline {{ {self.files} batch_size: 16 image_height: {SIZE} shuffle {{ buffer_size: 64 }} }}
{extra}}}
"""

    @property
    def files(self):
        return f'files: "{self.data}/train-*.tfrecord"'

    def start(self):
        conf = self.workdir / "sluice.textproto"
        conf.write_text(self.config())
        log = self.workdir / "serve.log"
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [self.sluice_bin, "serve", "--config", str(conf), "--drain-seconds", "1",
                 *self.args],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = log.read_text()
            if f"listening on {self.host}:" in text:
                self.port = int(text.split(f"listening on {self.host}:")[1].split()[0])
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError("sluice serve did not start:\n" + log.read_text())

    @property
    def target(self):
        return f"{self.host}:{self.port}"

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def server(sluice_bin, data_dir, tmp_path_factory):
    s = Server(sluice_bin, tmp_path_factory.mktemp("serve"), data_dir)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fleet(sluice_bin, data_dir, tmp_path_factory):
    """Two servers of one data set started with --shard 0/2 and 1/2, as a fleet's workers."""
    servers = [Server(sluice_bin, tmp_path_factory.mktemp("shard%d" % i), data_dir,
                      args=["--shard", "%d/2" % i]) for i in range(2)]
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture
def client(server):
    import sluice  # here, not at the top: conftest.py imports this module in every venv
    with sluice.Client(server.target) as c:
        yield c


def digest(images, labels, position):
    return (hashlib.sha1(images).hexdigest(), labels.tolist(), tuple(position))


def read_tfrecords(paths):
    """Records of TFRecord files, in order (framing only; CRCs are the reader tests' business)."""
    for path in paths:
        data = Path(path).read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            yield data[pos + 12:pos + 12 + length]
            pos += 12 + length + 4


def pooling_model(tf, loss):
    """A Keras classifier of 4 classes on 32x32 uint8 images, as small as fit() allows, compiled
    with `loss` (from logits)."""
    model = tf.keras.Sequential([tf.keras.Input((32, 32, 3)),
                                 tf.keras.layers.Rescaling(1 / 255),
                                 tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss=loss(from_logits=True))
    return model
