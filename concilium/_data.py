"""``concilium data split``: materialized partitions, one directory per member, and the helper
``testnet init|local`` use to give each node its own data through the same local-data interface.

A split folder::

    DIR/member-<i>/   member i's training data in its format, and ``validation.<ext>`` (its local validation split)
    DIR/test/         the held-out test split (npz), for whoever evaluates the global model
    DIR/public/       the shared public split (npz), where a strategy scores models on one (``--public N``)
    DIR/manifest.json sizes, label histograms, digests, formats and the data contract every member's data fits

Values are written raw: with an ``imagefolder`` member every format stores ``round(255 x)`` (integers in [0, 255])
and the contract's preprocessing scales by 1/255, so every member reads the same numbers whatever its format;
otherwise the float32 values are stored as they are and read back bit for bit.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST", "add_parsers", "member_files", "read_manifest", "split_to_dir"]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
MEMBERS_MAX = 1 << 16
EXIT_OK = 0
DATA_FILE = {"npz": "data.npz", "csv": "data.csv", "imagefolder": "images", "hf-disk": "data.hf"}
"""What ``write_local`` writes for member data in each format, under the member's directory."""
VALIDATION_FILE = {"npz": "validation.npz", "csv": "validation.csv", "imagefolder": "validation",
                   "hf-disk": "validation.hf"}
WRITABLE = tuple(DATA_FILE)


def _raw(dataset: Any, quantize: bool) -> Any:
    """``dataset`` with the raw values to store: ``round(255 x)`` when quantized (images in [0, 1]), else as is."""
    import torch  # noqa: PLC0415

    from learning import Dataset  # noqa: PLC0415

    if not quantize:
        return dataset
    x = torch.round(dataset.x.float() * 255.0).clamp_(0, 255)
    return Dataset(x=x, y=dataset.y, num_classes=dataset.num_classes, name=dataset.name)


def _histogram(dataset: Any) -> list[int]:
    import numpy as np  # noqa: PLC0415

    return [int(c) for c in np.bincount(dataset.y.numpy(), minlength=dataset.num_classes)]


def member_files(out: Path, i: int, train: Any, validation: Any, fmt: str, *, quantize: bool) -> dict[str, Any]:
    """Write member ``i``'s data under ``out/member-<i>/`` in ``fmt``; its manifest entry (paths relative to
    ``out``)."""
    from learning import dir_digest, write_local  # noqa: PLC0415

    d = out / f"member-{i}"
    d.mkdir(parents=True, exist_ok=True)
    write_local(_raw(train, quantize), d / DATA_FILE[fmt], fmt)
    entry: dict[str, Any] = {
        "index": i, "format": fmt, "path": f"member-{i}/{DATA_FILE[fmt]}", "samples": len(train),
        "labels": _histogram(train), "digest": dir_digest(d / DATA_FILE[fmt]).hex(),
    }
    if validation is not None and len(validation):
        write_local(_raw(validation, quantize), d / VALIDATION_FILE[fmt], fmt)
        entry["validation"] = {"path": f"member-{i}/{VALIDATION_FILE[fmt]}", "samples": len(validation),
                               "labels": _histogram(validation),
                               "digest": dir_digest(d / VALIDATION_FILE[fmt]).hex()}
    return entry


def _shared(out: Path, name: str, dataset: Any, *, quantize: bool) -> dict[str, Any]:
    from learning import dir_digest, write_local  # noqa: PLC0415

    (out / name).mkdir(parents=True, exist_ok=True)
    f = out / name / "data.npz"
    write_local(_raw(dataset, quantize), f, "npz")
    return {"path": f"{name}/data.npz", "format": "npz", "samples": len(dataset), "labels": _histogram(dataset),
            "digest": dir_digest(f).hex()}


def split_to_dir(
    out: Path,
    members: Sequence[tuple[Any, Any]],
    formats: Sequence[str],
    *,
    test: Any = None,
    public: Any = None,
    source: str = "",
    partition: str = "",
    seed: int = 0,
    contract: Any = None,
) -> dict[str, Any]:
    """Materialize ``members`` (``(train, validation)`` per member) under ``out``; member ``i`` in
    ``formats[i % len(formats)]``. Writes and returns the manifest. ``contract``: the data contract to record
    (default: that of the first member's data, with 1/255 scaling when quantized)."""
    from learning import DataContract, Preprocessing  # noqa: PLC0415

    quantize = "imagefolder" in formats
    first = members[0][0]
    if contract is None:
        contract = DataContract.of(first, Preprocessing(scale=1 / 255) if quantize else Preprocessing())
    entries = [member_files(out, i, tr, va, formats[i % len(formats)], quantize=quantize)
               for i, (tr, va) in enumerate(members)]
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION, "source": source, "partition": partition, "seed": seed,
        "contract": contract.to_params(), "members": entries,
    }
    if test is not None and len(test):
        manifest["test"] = _shared(out, "test", test, quantize=quantize)
    if public is not None and len(public):
        manifest["public"] = _shared(out, "public", public, quantize=quantize)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """A split folder's manifest, checked enough to wire nodes to it (one-line ``ConfigFileError`` otherwise)."""
    from node import ConfigFileError  # noqa: PLC0415

    p = Path(folder) / MANIFEST
    try:
        raw = p.read_bytes()[: 64 << 20]
        m = json.loads(raw)
    except FileNotFoundError:
        raise ConfigFileError(f"{p}: no manifest (write the folder with concilium data split)") from None
    except (OSError, ValueError) as e:
        raise ConfigFileError(f"{p}: not a data split manifest ({type(e).__name__})") from None
    if not isinstance(m, dict) or m.get("version") != MANIFEST_VERSION or not isinstance(m.get("members"), list):
        raise ConfigFileError(f"{p}: version: expected a version {MANIFEST_VERSION} manifest with members, found "
                              f"{m.get('version') if isinstance(m, dict) else type(m).__name__!r}")
    for i, e in enumerate(m["members"]):
        if not isinstance(e, dict) or e.get("index") != i or not isinstance(e.get("path"), str) \
                or e.get("format") not in WRITABLE or type(e.get("samples")) is not int:
            raise ConfigFileError(f"{p}: members[{i}]: expected index {i}, path, format and samples")
        if ".." in Path(e["path"]).parts or Path(e["path"]).is_absolute():
            raise ConfigFileError(f"{p}: members[{i}].path: expected a path inside the folder, found {e['path']!r:.80}")
    return m


def _load_source(source: str, source_format: str, args: argparse.Namespace) -> tuple[Any, Any, str]:
    """``(train, test, name)`` of SOURCE: a bundled dataset spec (``digits``, ``"digits(image=true)"``,
    ``synthetic(...)``) or, with ``--source-format``, a local dataset (a file or folder) in that format."""
    from learning import LocalData, dataset_spec, load_local, parse_spec  # noqa: PLC0415

    if source_format:
        train, test = load_local(LocalData(path=source, format=source_format, validation=args.test_fraction,
                                           seed=args.seed))
        return train, test, Path(source).name
    name, params = parse_spec(source)
    return *_splits(dataset_spec(name, params).load()), name


def _splits(splits: Any) -> tuple[Any, Any]:
    return splits.train, splits.test


def cmd_data_split(args: argparse.Namespace) -> int:
    from learning import LearningError, RngTree, parse_spec, partition_dataset, partition_spec  # noqa: PLC0415
    from learning.data import split_random  # noqa: PLC0415
    from node import ConfigFileError  # noqa: PLC0415
    from node.config import OutputPathError  # noqa: PLC0415
    from sim import results_folder  # noqa: PLC0415

    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in WRITABLE]
    if not formats or bad:
        raise ConfigFileError(f"--format {args.format}: expected one or more of {', '.join(WRITABLE)} (comma-separated: "
                              "member i gets the i-th, round robin)")
    if not 0.0 <= args.validation < 1.0:
        raise ConfigFileError(f"--validation {args.validation}: expected a fraction in [0, 1)")
    try:
        train, test, name = _load_source(args.source, args.source_format or "", args)
        rng = RngTree(args.seed)
        public = None
        if args.public:
            if args.public >= len(train):
                raise ConfigFileError(f"--public {args.public}: expected fewer than the {len(train)} training samples")
            public, train = split_random(train, args.public, rng=rng.child("public").numpy())
        pname, pparams = parse_spec(args.partition)
        from learning import PARTITIONS  # noqa: PLC0415

        fields_ = getattr(PARTITIONS.get(pname), "__dataclass_fields__", {})
        for k in ("num_clients", "max_clients"):
            if k in fields_:
                pparams.setdefault(k, args.members)
        part = partition_dataset(partition_spec(pname, pparams), train, seed=rng.child("partition").seed64() % 2**32)
        if len(part) != args.members:
            raise ConfigFileError(f"--partition {args.partition}: made {len(part)} members, expected {args.members}")
        members = []
        for i, idx in enumerate(part.clients):
            mine = train.subset(idx)
            val = None
            if args.validation and len(mine) > 1:
                k = max(1, int(round(args.validation * len(mine))))
                val, mine = split_random(mine, k, rng=rng.child("validation", i).numpy())
            members.append((mine, val))
    except LearningError as e:
        raise ConfigFileError(f"{args.source}: {e}") from None
    try:
        with results_folder(Path(args.out), force=args.force) as out:
            manifest = split_to_dir(out, members, formats, test=test, public=public, source=args.source,
                                    partition=args.partition, seed=args.seed)
    except OutputPathError:
        raise
    sizes = [m["samples"] for m in manifest["members"]]
    print(f"data split {name}: {len(sizes)} members ({', '.join(sorted(set(formats)))}) in {args.out}/: samples "
          f"min {min(sizes)} mean {sum(sizes) / len(sizes):.1f} max {max(sizes)}; contract "
          f"{manifest['contract']['shape']} x {manifest['contract']['classes']} classes")
    print(f"wire nodes to it: concilium testnet init --data {args.out} ... (node i trains on {args.out}/member-<i>/)")
    return EXIT_OK


def add_parsers(sub: Any, int_in: Any) -> None:
    d = sub.add_parser("data", help="materialize datasets for nodes").add_subparsers(dest="sub", required=True)
    sp = d.add_parser("split", help="write one directory per member (member-<i>/), a test split and manifest.json",
                      description="Partition a dataset among N members and write each member's own directory.")
    sp.add_argument("source", metavar="SOURCE",
                    help='a bundled dataset ("digits", "digits(image=true)", "synthetic(alpha=1,beta=1)") or, with '
                         "--source-format, a local file or folder")
    sp.add_argument("--source-format", dest="source_format", metavar="FORMAT",
                    help="SOURCE is a local dataset in this format (npz, csv, imagefolder, idx, cifar10, leaf, hf-disk)")
    sp.add_argument("--members", type=int_in(1, MEMBERS_MAX), required=True, help="number of members")
    sp.add_argument("--partition", default="iid",
                    help='a partition of the scenarios: iid, "dirichlet(alpha=0.3)", "k_classes(k=2)", ... (default iid)')
    sp.add_argument("--format", default="npz",
                    help="npz, csv, imagefolder or hf-disk (a Hugging Face datasets folder, the 'hf' extra); "
                         "comma-separated for a mix, member i gets the i-th (default npz)")
    sp.add_argument("--validation", type=float, default=0.1,
                    help="the fraction of each member's data held out as its local validation split (default 0.1)")
    sp.add_argument("--test-fraction", dest="test_fraction", type=float, default=0.2,
                    help="with --source-format: the fraction held out as the test split (default 0.2)")
    sp.add_argument("--public", type=int_in(0, 1 << 30), default=0,
                    help="samples set aside as a shared public split (Sself, FedAsync's filter; default none)")
    sp.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0, help="the partition's seed (default 0)")
    sp.add_argument("--out", required=True, help="folder to write (new or empty)")
    sp.add_argument("--force", action="store_true", help="replace an earlier folder at --out")
    sp.set_defaults(func=cmd_data_split)
