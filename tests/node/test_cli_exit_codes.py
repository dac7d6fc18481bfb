"""Exit codes mean one thing: 1 = the ledger (or proof) is invalid, 2 = bad input.

Once a file carries the SQLite header and concilium's ``application_id`` it is a concilium ledger, and
whatever is wrong inside it (a tampered genesis or index column, a missing block, a corrupted page) makes
``ledger verify``, ``show``, ``export`` and ``proof`` all answer exit 1 with the same one-line ``FAIL``
verdict on stdout, naming the same first bad height. Anything that is not such a file is bad input.
"""

import shutil
import sqlite3
from pathlib import Path

import pytest

from concilium.cli import main
from ledger import Block


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["ledger", "demo", "--out", str(out), "--blocks", "6", "--members", "7", "--updates", "4"]) == 0
    return out


@pytest.fixture
def ledger(demo, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(demo, dst)
    return dst / "ledger"


def _sql(ledger: Path, *statements: tuple[str, tuple]) -> None:
    c = sqlite3.connect(ledger / "chain.sqlite")
    for q, a in statements:
        c.execute(q, a)
    c.commit()
    c.close()


def _value(ledger: Path, q: str, *a) -> bytes:
    c = sqlite3.connect(ledger / "chain.sqlite")
    (v,) = c.execute(q, a).fetchone()
    c.close()
    return v


def _flip_genesis(ledger: Path) -> None:
    g = bytearray(_value(ledger, "SELECT value FROM meta WHERE key = 'genesis'"))
    g[len(g) // 2] ^= 0x01
    _sql(ledger, ("UPDATE meta SET value = ? WHERE key = 'genesis'", (bytes(g),)))


def _smash_page(table: str):
    def smash(ledger: Path) -> None:
        page = _value(ledger, "SELECT rootpage FROM sqlite_master WHERE name = ?", table)
        with open(ledger / "chain.sqlite", "r+b") as f:
            f.seek((page - 1) * 4096)
            f.write(b"\xa5" * 64)

    return smash


TAMPERS = {
    # name: (tamper, the verdict every command prints)
    "prev_hash index": (
        lambda L: _sql(L, ("UPDATE blocks SET prev_hash = ? WHERE height = 3", (bytes(32),))),
        "FAIL at height 3: the store's prev_hash index differs from the block's prev_hash (valid prefix: 2 blocks)",
    ),
    "hash index": (
        lambda L: _sql(L, ("UPDATE blocks SET hash = ? WHERE height = 3", (bytes(32),))),
        "FAIL at height 3: the store's hash index differs from the block's hash (valid prefix: 2 blocks)",
    ),
    "head hash index": (
        lambda L: _sql(L, ("UPDATE blocks SET hash = ? WHERE height = 6", (bytes(32),))),
        "FAIL at height 6: the store's hash index differs from the block's hash (valid prefix: 5 blocks)",
    ),
    "deleted block": (
        lambda L: _sql(L, ("DELETE FROM blocks WHERE height = 4", ())),
        "FAIL at height 4: missing (the next stored block is height 5) (valid prefix: 3 blocks)",
    ),
    "block bytes": (  # at the height that show and proof read: a view of another block need not decode this one
        lambda L: _sql(L, ("UPDATE blocks SET data = ? WHERE height = 5", (b"\xc1",))),
        "FAIL at height 5: ",
    ),
    "genesis bytes": (_flip_genesis, "FAIL at height 0: the stored genesis is corrupt: "),
    "genesis hash": (
        lambda L: _sql(L, ("UPDATE meta SET value = ? WHERE key = 'genesis_hash'", (bytes(32),))),
        "FAIL at height 0: the stored genesis hash does not match the stored genesis",
    ),
    "genesis missing": (
        lambda L: _sql(L, ("DELETE FROM meta WHERE key = 'genesis'", ())),
        "FAIL at height 0: the stored genesis is missing",
    ),
    "chain id": (
        lambda L: _sql(L, ("UPDATE meta SET value = ? WHERE key = 'chain_id'", (b"other",))),
        "FAIL at height 0: the stored chain id differs from the stored genesis's",
    ),
    "schema version": (
        lambda L: _sql(L, ("UPDATE meta SET value = ? WHERE key = 'schema_version'", (b"one",))),
        "FAIL: {chain}: the stored schema version b'one' is not one concilium writes",
    ),
    "blocks page": (_smash_page("blocks"), "FAIL: {chain}: unreadable: database disk image is malformed"),
    "meta page": (_smash_page("meta"), "FAIL: {chain}: unreadable: database disk image is malformed"),
}


def _commands(ledger: Path, peer: str) -> list[list[str]]:
    L, out = str(ledger), ledger.parent
    return [
        ["ledger", "verify", L],
        ["ledger", "show", L],
        ["ledger", "show", L, "5"],
        ["ledger", "export", L, "--json", "--out", str(out / "export.json")],
        ["ledger", "proof", L, "5", peer, "--out", str(out / "proof.json")],
    ]


@pytest.mark.parametrize("name", list(TAMPERS))
def test_an_invalid_ledger_exits_1_with_the_same_verdict_for_every_command(capsys, ledger, name):
    peer = Block.decode(_value(ledger, "SELECT data FROM blocks WHERE height = 5")).payload.updates[0].peer
    tamper, verdict = TAMPERS[name]
    tamper(ledger)
    verdict = verdict.format(chain=ledger / "chain.sqlite")
    before = snapshot(ledger.parent)
    for argv in _commands(ledger, peer):
        code, out, err = run(capsys, *argv)
        assert (code, err) == (1, ""), (name, argv[1], out, err)
        assert out.count("\n") == 1 and out.startswith(verdict), (name, argv[1], out)
    assert snapshot(ledger.parent) == before, "a failing command wrote or changed files"


def test_an_intact_ledger_exits_0_for_every_command(capsys, ledger):
    """The other half of the test above: the same commands on the untouched copy succeed. A demo ledger's rounds are
    synthetic: ``verify`` re-executes none, so it says so and exits 3, and 0 with ``--reexec no``."""
    peer = Block.decode(_value(ledger, "SELECT data FROM blocks WHERE height = 5")).payload.updates[0].peer
    for argv in _commands(ledger, peer):
        if argv[1] == "verify":
            code, out, err = run(capsys, *argv)
            assert (code, err) == (3, "") and out.startswith("NOT RE-EXECUTED: chain concilium-demo verified, 6 blocks")
            assert "its rounds were not re-executed: algorithm 'demo' cannot be built here" in out, out
            argv = [*argv, "--reexec", "no"]
        code, out, err = run(capsys, *argv)
        assert code == 0 and not out.startswith("FAIL"), (argv[1], out, err)


def test_a_proof_from_a_block_that_fails_verification_exits_1(capsys, ledger):
    """A commit signature flipped inside block 5: the header (and so the hash index) is unchanged, so the views
    still read it, but ``verify`` fails at 5 and ``proof`` refuses to hand out a proof that does not verify."""
    raw = _value(ledger, "SELECT data FROM blocks WHERE height = 5")
    block = Block.decode(raw)
    sig = block.certificate.signatures[0].signature
    bad = raw.replace(sig, bytes([sig[0] ^ 1]) + sig[1:])
    assert bad != raw and Block.decode(bad).hash() == block.hash()
    _sql(ledger, ("UPDATE blocks SET data = ? WHERE height = 5", (bad,)))
    code, out, _ = run(capsys, "ledger", "verify", str(ledger))
    assert code == 1 and out.startswith("FAIL at height 5: ")
    out_file = ledger.parent / "proof.json"
    code, out, err = run(capsys, "ledger", "proof", str(ledger), "5", block.payload.updates[0].peer, "--out", str(out_file))
    assert (code, err) == (1, "") and out.count("\n") == 1, (out, err)
    assert out.startswith("FAIL at height 5: ") and out.rstrip().endswith("(no proof written)")
    assert not out_file.exists()


def _foreign_sqlite(L: Path) -> None:
    (L / "chain.sqlite").unlink()
    c = sqlite3.connect(L / "chain.sqlite")
    c.execute("CREATE TABLE meta (key TEXT, value BLOB)")
    c.commit()
    c.close()


def _garbage_header(L: Path) -> None:
    raw = bytearray((L / "chain.sqlite").read_bytes())
    raw[0:16] = b"garbage garbage!"
    (L / "chain.sqlite").write_bytes(bytes(raw))


BAD_INPUTS = {
    # name: (make the input bad, expected text of the one-line error)
    "garbage header": (_garbage_header, "not a concilium ledger"),
    "empty file": (lambda L: (L / "chain.sqlite").write_bytes(b""), "not a concilium ledger"),
    "foreign SQLite database": (_foreign_sqlite, "not a concilium ledger (application_id 0x0)"),
    "newer schema version": (
        lambda L: _sql(L, ("UPDATE meta SET value = ? WHERE key = 'schema_version'", (b"2",))),
        "unsupported schema version b'2', this concilium reads 1",
    ),
    "no chain file": (lambda L: (L / "chain.sqlite").unlink(), "no such ledger file"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_what_is_not_a_readable_concilium_ledger_is_bad_input(capsys, ledger, name):
    make_bad, expected = BAD_INPUTS[name]
    make_bad(ledger)
    before = snapshot(ledger.parent)
    for argv in _commands(ledger, "12D3KooWnobody"):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), (name, argv[1], out, err)
        assert err.startswith("concilium: error: ") and err.count("\n") == 1 and expected in err, (name, argv[1], err)
    assert snapshot(ledger.parent) == before


def test_no_blobs_says_why_rounds_are_not_re_executed(capsys, ledger):
    code, out, _ = run(capsys, "ledger", "verify", str(ledger), "--no-blobs")
    assert code == 0 and out.count("\n") == 1
    assert out.rstrip().endswith("(rounds not re-executed: --no-blobs skips the blobs that re-execution reads)")
    assert "no re-executor" not in out
    code, out, err = run(capsys, "ledger", "verify", str(ledger), "--no-blobs", "--reexec", "yes")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--no-blobs" in err
