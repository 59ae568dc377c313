"""walcast-sink-pyfile: a walcast sink written in Python.

It appends every event's envelope to a file, one JSON object per line,
like the Go skeleton of `walcast plugin new`. What it shows is everything a
plugin in a language other than Go must do, with nothing but Debian's
python3-grpcio, python3-protobuf and python3-cryptography:

  1. refuse to run unless started by walcast (the magic cookie);
  2. serve walcast.sink.v1.Sink (stubs generated from
     proto/sink/v1/sink.proto by build.sh), plus what go-plugin calls on
     every plugin: the gRPC health service ("plugin" SERVING), the
     controller's Shutdown and the stdio stream;
  3. with AutoMTLS (walcast always asks for it), serve TLS with a fresh
     self-signed certificate and accept only the client certificate walcast
     passed in PLUGIN_CLIENT_CERT;
  4. print one handshake line on stdout and nothing else ever after;
  5. log JSON lines in hclog's format on stderr;
  6. report errors as the gRPC status codes walcast maps to its error kinds.

docs/writing-a-sink.md ("Sinks in other languages") explains each step.
"""

import base64
import datetime
import json
import os
import signal
import sys
import threading
from concurrent import futures

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sink.v1 import sink_pb2, sink_pb2_grpc

NAME = "pyfile"
VERSION = "0.1.0"

# The handshake walcast's host expects (proto/sink/wire/handshake.go).
CORE_PROTOCOL_VERSION = 1  # go-plugin's own
# walcast.sink.v1, which every walcast host speaks; version 2
# (proto/sink/v2) only adds per-event failures to Deliver's answer, which a
# sink that writes whole batches does not need.
APP_PROTOCOL_VERSION = 1
COOKIE_KEY, COOKIE_VALUE = "WALCAST_PLUGIN", "d1c8a3f5-walcast-sink"

# Standard out carries the handshake line and nothing else: keep the real
# one and send every later print to stderr.
HANDSHAKE_OUT = sys.stdout
sys.stdout = sys.stderr

LEVELS = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "error": 4}
LOG_LEVEL = LEVELS.get(os.environ.get("WALCAST_PLUGIN_LOG_LEVEL", "info").lower(), 2)


def log(level, message, **attrs):
    """Writes one hclog JSON line on stderr; walcast re-emits it at that
    level, tagged with the sink's id."""
    if LEVELS[level] < LOG_LEVEL:
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    line = {"@level": level, "@message": message,
            "@timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00", **attrs}
    sys.stderr.write(json.dumps(line) + "\n")
    sys.stderr.flush()


# ---- errors: what the host does with each status code ------------------
#
# InvalidArgument + google.rpc.BadRequest  a config error, per attribute
# ResourceExhausted + google.rpc.RetryInfo throttled: pause, then retry
# FailedPrecondition                       permanent: park the events
# Aborted                                  fatal: stop the pipeline
# Unavailable (and anything else)          retry with backoff
#
# The details travel in the grpc-status-details-bin trailer as a
# google.rpc.Status. They are encoded by hand below (three small
# messages), so that no generated googleapis code is needed.

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    """A length-delimited protobuf field."""
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _status_details(code, message, detail_type, detail):
    any_msg = _field(1, "type.googleapis.com/" + detail_type) + _field(2, detail)
    return _varint(1 << 3) + _varint(code.value[0]) + _field(2, message) + _field(3, any_msg)


def config_error(context, field, message):
    """Rejects the config block, pointing walcast at the attribute."""
    violation = _field(1, field) + _field(2, message)
    text = f"{field}: {message}"
    details = _status_details(grpc.StatusCode.INVALID_ARGUMENT, text, "google.rpc.BadRequest", _field(1, violation))
    context.set_trailing_metadata((("grpc-status-details-bin", details),))
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, text)


def retryable(context, message):
    context.abort(grpc.StatusCode.UNAVAILABLE, message)


# ---- the sink ----------------------------------------------------------

class FileSink(sink_pb2_grpc.SinkServicer):
    def __init__(self):
        self.lock = threading.Lock()  # Deliver runs concurrently
        self.path = None
        self.fsync = True
        self.file = None

    def Describe(self, request, context):
        return sink_pb2.DescribeResponse(name=NAME, version=VERSION, config=[
            sink_pb2.ConfigField(name="path", type="string", required=True,
                                 doc="Absolute path of the file the events are appended to; created when missing."),
            sink_pb2.ConfigField(name="fsync", type="bool",
                                 doc="Sync the file before acknowledging a batch (default true)."),
        ])

    def Configure(self, request, context):
        # The block arrives as JSON, already checked against Describe's
        # attributes by walcast validate (not by `walcast plugin test`).
        try:
            config = json.loads(request.config or b"{}")
        except ValueError as e:
            config_error(context, "", f"not a JSON object: {e}")
        if not isinstance(config, dict):
            config_error(context, "", "not a JSON object")
        path = config.get("path")
        if not isinstance(path, str) or not path:
            config_error(context, "path", "is required")
        if not os.path.isabs(path):
            config_error(context, "path", f"must be an absolute path, not {path!r}")
        fsync = config.get("fsync", True)
        if not isinstance(fsync, bool):
            config_error(context, "fsync", "must be a bool")
        with self.lock:
            self.path, self.fsync = path, fsync
        log("debug", "configured", pipeline=request.pipeline, sink_id=request.sink_id)
        return sink_pb2.ConfigureResponse()

    def Open(self, request, context):
        with self.lock:
            try:
                self.file = open(self.path, "ab")
            except (OSError, TypeError) as e:
                retryable(context, f"open {self.path}: {e}")
        log("info", "appending events", path=self.path)
        return sink_pb2.OpenResponse()

    def Deliver(self, request, context):
        # Returning means every event is durably at the destination: only
        # then does walcast acknowledge. Any error makes it deliver the
        # batch again (receivers dedupe on the event id).
        data = b"".join(e.payload + b"\n" for e in request.events)
        with self.lock:
            if self.file is None:
                retryable(context, "deliver before open")
            if not context.is_active():
                retryable(context, "deliver: walcast gave up on this call")
            try:
                self.file.write(data)
                self.file.flush()
                if self.fsync:
                    os.fsync(self.file.fileno())
            except OSError as e:
                retryable(context, f"write to {self.path}: {e}")
        return sink_pb2.DeliverResponse()

    def Close(self, request, context):
        with self.lock:
            if self.file is not None:
                self.file.close()
                self.file = None
        return sink_pb2.CloseResponse()


# ---- what go-plugin calls on every plugin --------------------------------

def _identity(b):
    return b


def go_plugin_services(shutdown):
    """The health check go-plugin uses to tell a live plugin, the
    controller it asks to shut down, and the stdio stream it opens (this
    plugin's stdout and stderr reach walcast through the pipes, so the
    stream stays silent until walcast closes it)."""

    def health_check(request, context):
        return b"\x08\x01"  # HealthCheckResponse{status: SERVING}

    def shutdown_rpc(request, context):
        threading.Thread(target=shutdown).start()
        return b""  # google.protobuf.Empty

    def stream_stdio(request, context):
        done = threading.Event()
        context.add_callback(done.set)
        done.wait()
        return iter(())

    unary = lambda f: grpc.unary_unary_rpc_method_handler(f, request_deserializer=_identity, response_serializer=_identity)
    return [
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": unary(health_check)}),
        grpc.method_handlers_generic_handler("plugin.GRPCController", {"Shutdown": unary(shutdown_rpc)}),
        grpc.method_handlers_generic_handler("plugin.GRPCStdio", {"StreamStdio": grpc.unary_stream_rpc_method_handler(
            stream_stdio, request_deserializer=_identity, response_serializer=_identity)}),
    ]


def auto_mtls():
    """Returns server credentials and the certificate for the handshake
    line, or (None, None) when walcast sent no client certificate."""
    client_pem = os.environ.get("PLUGIN_CLIENT_CERT")
    if not client_pem:
        return None, None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_agreement=True,
                                         key_cert_sign=True, content_commitment=False, data_encipherment=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    creds = grpc.ssl_server_credentials([(key_pem, cert.public_bytes(serialization.Encoding.PEM))],
                                        root_certificates=client_pem.encode(), require_client_auth=True)
    # go-plugin reads the DER certificate in base64 without padding.
    der = cert.public_bytes(serialization.Encoding.DER)
    return creds, base64.b64encode(der).decode().rstrip("=")


def main():
    if os.environ.get(COOKIE_KEY) != COOKIE_VALUE:
        sys.stderr.write("This is a walcast sink plugin: walcast starts it (walcast plugin install, walcast run).\n")
        return 1
    versions = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(APP_PROTOCOL_VERSION)).split(",")
    if str(APP_PROTOCOL_VERSION) not in versions:
        sys.stderr.write(f"walcast speaks sink protocol {versions}, this plugin {APP_PROTOCOL_VERSION}: upgrade one of them\n")
        return 1
    # walcast stops its plugins itself, after the batches in flight; a
    # Ctrl-C or SIGTERM sent to the whole process group must not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 2**31 - 1),
                                  ("grpc.max_send_message_length", 2**31 - 1)])
    stopped = threading.Event()

    def shutdown():
        server.stop(grace=1).wait()
        stopped.set()

    sink_pb2_grpc.add_SinkServicer_to_server(FileSink(), server)
    server.add_generic_rpc_handlers(go_plugin_services(shutdown))
    creds, cert = auto_mtls()
    if creds is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()

    line = f"{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|tcp|127.0.0.1:{port}|grpc"
    if cert:
        line += "|" + cert
    HANDSHAKE_OUT.write(line + "\n")
    HANDSHAKE_OUT.flush()
    log("debug", "serving", port=port, tls=cert is not None)
    stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
