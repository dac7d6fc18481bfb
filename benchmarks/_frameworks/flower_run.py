"""Flower's simulation (``flwr.simulation.run_simulation``, Ray backend) on the workload of ``benchmarks/frameworks.py``.

    python benchmarks/_frameworks/flower_run.py WORKLOAD.npz OUT_DIR CPUS

Run with the Flower environment that ``frameworks.py`` builds (flwr[simulation] 1.42.0, Ray 2.55.1, torch 2.13.0).
A ``ServerApp`` runs Flower's own message-API ``FedAvg`` strategy (every node sampled every round, no federated
evaluation; aggregation weighted by ``num-examples`` = the client's local dataset size, in Flower's float32
arithmetic and reply order) with a centralized ``evaluate_fn`` on the test split; the ``ClientApp`` of virtual
node ``partition-id = i`` is client ``i`` of the workload and trains on its replayed minibatches with
``torch.optim.SGD``. Ray gets ``CPUS`` CPUs and each ClientApp asks for one, so ``CPUS`` clients train at once.
Telemetry is off (``FLWR_TELEMETRY_ENABLED=0``, set by ``frameworks.py``).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import DigitsMLP, Recorder, Workload, accuracy, local_train  # noqa: E402

WORKLOAD_ENV = "CONCILIUM_FRAMEWORKS_WORKLOAD"
_cache: dict[str, object] = {}  # client side, filled in each Ray actor (empty in the driver, which never trains)


def _workload() -> Workload:
    """The workload, loaded once per Ray actor (the ClientApp's process)."""
    if "w" not in _cache:
        torch.set_num_threads(1)
        _cache["w"] = Workload(os.environ[WORKLOAD_ENV])
    return _cache["w"]  # type: ignore[return-value]


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    w = _workload()
    i = int(context.node_config["partition-id"])
    fl_round = int(msg.content["config"]["server-round"])
    model = _cache.get("model")
    if model is None:
        model = _cache["model"] = DigitsMLP(w.train_x.shape[1], w.hidden, w.num_classes)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=w.lr)
    x, y = w.client(i)
    local_train(model, optimizer, x, y, w.round_batches(fl_round, i))
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": w.n_samples[i]})})
    return Message(content=content, reply_to=msg)


server_app = ServerApp()
REC = Recorder(STARTED)
_server: dict[str, Workload] = {}  # driver side: the workload, loaded once in run()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    w = _server["w"]
    model = w.model()
    eval_model = DigitsMLP(w.train_x.shape[1], w.hidden, w.num_classes)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        if server_round == 0:  # the initial model: not a round
            return None
        eval_model.load_state_dict(arrays.to_torch_state_dict())
        acc = accuracy(eval_model, w.test_x, w.test_y)
        REC.record(eval_model, acc)
        return MetricRecord({"accuracy": acc})

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=w.clients,
                      min_available_nodes=w.clients)
    REC.mark("setup")
    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=w.rounds,
                   evaluate_fn=evaluate)
    REC.mark("rounds")


def run(workload: str, out: str, cpus: int) -> None:
    REC.mark("imported")
    os.environ[WORKLOAD_ENV] = str(Path(workload).resolve())
    here = str(Path(__file__).resolve().parent)  # Ray's worker processes import `replay` from here
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    torch.set_num_threads(1)
    w = _server["w"] = Workload(workload)
    run_simulation(
        server_app=server_app, client_app=client_app, num_supernodes=w.clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False}},
    )
    REC.mark("simulation_returned")
    if len(REC.accuracies) != w.rounds:
        raise SystemExit(f"flower: {len(REC.accuracies)} evaluated rounds of {w.rounds}")
    REC.write(out, implementation="flower", ray_cpus=cpus)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
