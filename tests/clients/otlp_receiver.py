"""A loopback OTLP receiver: OTLP/HTTP (protobuf), or OTLP/gRPC when argv[3] is `grpc`.
Decodes each export with the official opentelemetry-proto messages (and, over gRPC, its
generated grpcio services) and appends what it got, one JSON object per line, to the
file named by argv[2] (`-`: only counts them, for the benchmarks). Listens on
127.0.0.1:argv[1] (0: any free port; the port is printed on stdout first)."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Counter:
    """Stands in for the output file: decodes everything, writes nothing."""

    def write(self, _line):
        pass


out = Counter() if sys.argv[2] == "-" else open(sys.argv[2], "a", buffering=1)


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def record_traces(request, transport):
    for rs in request.resource_spans:
        resource = attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                out.write(json.dumps({
                    "signal": "span",
                    "transport": transport,
                    "service": resource.get("service.name"),
                    "name": span.name,
                    "kind": span.kind,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "attributes": attrs(span.attributes),
                    "status": span.status.code,
                }) + "\n")


def record_metrics(request, transport):
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.write(json.dumps({
                    "signal": "metric",
                    "transport": transport,
                    "name": metric.name,
                }) + "\n")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        if self.path == "/v1/traces":
            record_traces(ExportTraceServiceRequest.FromString(body), "http")
            reply = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            record_metrics(ExportMetricsServiceRequest.FromString(body), "http")
            reply = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def serve_grpc(port):
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            record_traces(request, "grpc")
            return ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request, context):
            record_metrics(request, "grpc")
            return ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print(bound, flush=True)
    server.wait_for_termination()


if len(sys.argv) > 3 and sys.argv[3] == "grpc":
    serve_grpc(int(sys.argv[1]))
else:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
