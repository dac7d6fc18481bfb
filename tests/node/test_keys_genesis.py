"""Key files (libp2p format, 0600) and genesis TOML files (strict, clear errors)."""

import os
import stat

import pytest

from ledger import KeyPair
from node._errors import ConfigFileError, KeyFileError
from node.config import dump_genesis, load_genesis, save_genesis
from node.keys import generate_key, load_key, save_key
from ledger.testing import demo_genesis


def test_key_file_is_0600_and_libp2p_compatible(tmp_path):
    from libp2p.identity_utils import load_identity
    from libp2p.peer.id import ID

    k = generate_key()
    p = tmp_path / "node.key"
    save_key(k, p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert load_key(p) == k
    kp = load_identity(p)  # py-libp2p reads our file ...
    assert ID.from_pubkey(kp.public_key).to_base58() == k.peer_id  # ... and gets the same peer id
    with pytest.raises(KeyFileError, match="already exists"):
        save_key(generate_key(), p)
    assert load_key(p) == k  # not overwritten


def test_bad_key_files(tmp_path):
    with pytest.raises(KeyFileError, match="no such key file"):
        load_key(tmp_path / "absent.key")
    wrong = tmp_path / "wrong.key"
    wrong.write_text("chain_id = 'x'\n")
    os.chmod(wrong, 0o600)
    with pytest.raises(KeyFileError, match="not an Ed25519 key file"):
        load_key(wrong)
    k = KeyPair.derive("x")
    loose = tmp_path / "loose.key"
    save_key(k, loose)
    os.chmod(loose, 0o644)
    with pytest.raises(KeyFileError, match="too open"):
        load_key(loose)
    secp = tmp_path / "secp.key"
    secp.write_bytes(b"\x08\x02\x12\x20" + bytes(32))
    os.chmod(secp, 0o600)
    with pytest.raises(KeyFileError, match="unknown key type"):
        load_key(secp)


def _write(tmp_path, text):
    p = tmp_path / "genesis.toml"
    p.write_text(text)
    return p


def test_genesis_toml_round_trip(tmp_path):
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    p = tmp_path / "g.toml"
    save_genesis(g, p)
    assert load_genesis(p) == g
    assert f"genesis hash: {g.hash().hex()}" in p.read_text()


def test_genesis_member_order_in_file_does_not_matter(tmp_path):
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    text = dump_genesis(g)
    blocks = text.split("[[members]]")
    shuffled = blocks[0] + "[[members]]" + "[[members]]".join(reversed(blocks[1:]))
    assert load_genesis(_write(tmp_path, shuffled)) == g


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace('chain_id = "concilium-demo"', 'chain_id = "concilium-demo"\ncolour = "red"'), "unknown field colour"),
        (lambda t: t.replace('chain_id = "concilium-demo"\n', ""), "missing field chain_id"),
        (lambda t: t.replace("committee_size = 4", "committee_size = 4\nspeed = 3"), "unknown field protocol.speed"),
        (lambda t: t.replace("committee_size = 4", 'committee_size = "four"'), "protocol.committee_size: expected an integer"),
        (lambda t: t.replace('mode = "coordinator"', 'mode = "server"'), "protocol: mode must be one of"),
        (lambda t: t + "\n[[members]]\npeer_id = \"12D3KooWx\"\npublic_key = \"zz\"\n", "members[5].public_key: not a hex string"),
        (lambda t: t.replace("[model]", "[model]\n[model]"), "not a valid TOML"),
    ],
)
def test_genesis_errors_name_the_problem(tmp_path, edit, message):
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    p = _write(tmp_path, edit(dump_genesis(g)))
    with pytest.raises(ConfigFileError, match=message.replace("[", r"\[").replace("]", r"\]")) as ei:
        load_genesis(p)
    assert str(p) in str(ei.value)


def test_genesis_duplicate_and_bad_members(tmp_path):
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    text = dump_genesis(g)
    first = "[[members]]" + text.split("[[members]]")[1]
    with pytest.raises(ConfigFileError, match="duplicate member"):
        load_genesis(_write(tmp_path, text + "\n" + first))
    other = KeyPair.derive("other").public_key.hex()
    pk = first.split('public_key = "')[1].split('"')[0]
    with pytest.raises(ConfigFileError, match="does not match its public key"):
        load_genesis(_write(tmp_path, text.replace(pk, other)))
    with pytest.raises(ConfigFileError, match="no such genesis file"):
        load_genesis(tmp_path / "absent.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigFileError, match="not UTF-8"):
        load_genesis(binary)
