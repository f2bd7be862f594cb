"""SluiceError: how every failure of the client reaches its caller."""
import grpc


class SluiceError(Exception):
    """A failed call or stream: the gRPC status code and the server's message.

    code: a grpc.StatusCode (NOT_FOUND for an unknown dataset, INVALID_ARGUMENT for a request out
    of the dataset's limits, UNAVAILABLE when a server could not be reached within
    connect_timeout or, after a first batch, the reconnect deadline, FAILED_PRECONDITION for a
    fleet that serves only part of a sharded dataset, DATA_LOSS for a malformed batch, ...).
    message: the server's message (what to change), or the client's for errors it detects.
    target: the server's address, when the error came from one.
    """

    def __init__(self, code, message, target=None):
        self.code = code
        self.message = message
        self.target = target
        super().__init__(code, message, target)

    def __str__(self):
        where = " (%s)" % self.target if self.target else ""
        return "%s: %s%s" % (self.code.name, self.message, where)

    @classmethod
    def from_rpc_error(cls, error, target=None, suffix=""):
        code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
        details = error.details() if callable(getattr(error, "details", None)) else str(error)
        return cls(code, (details or code.name) + suffix, target)
