"""Shared-key frame authentication (nakflow.wire.auth): sealing, tampering, keys, replays."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nakflow import AuthError, ConfigError, SharedKey
from nakflow.keyfile import load_shared_key
from nakflow.wire import Bye, Credit, Data, End, FrameAuth, Hello, Nak, decode, encode
from nakflow.wire.auth import OVERHEAD_BYTES, origin
from tests.fuzz import budget

KEY = SharedKey(b"k" * 32)
NAK = encode(Nak("s", "r1", 100, 100.0, 1_000.0))
T = 1_000.0  # a wall-clock time, s


def pair(key: SharedKey = KEY) -> tuple[FrameAuth, FrameAuth]:
    return FrameAuth(key), FrameAuth(key)


def test_a_sealed_frame_opens_to_the_same_frame_with_the_clock_as_a_rising_counter():
    signer, verifier = pair()
    counters = []
    for now in (T, T, T + 1.0, T):  # the same microsecond twice; the clock stepping back
        body, counter = verifier.open(signer.seal(NAK, now=now))
        assert bytes(body) == NAK and decode(body) == decode(NAK)
        counters.append(counter)
    assert counters == [1_000_000_000, 1_000_000_001, 1_001_000_000, 1_001_000_001]
    assert len(signer.seal(NAK, now=T)) == len(NAK) + OVERHEAD_BYTES


@budget(300)
@given(st.data())
def test_any_changed_bit_is_refused(data):
    signer, verifier = pair()
    sealed = bytearray(signer.seal(NAK, now=T))
    i = data.draw(st.integers(0, len(sealed) - 1))
    sealed[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(AuthError):
        verifier.open(bytes(sealed))
    assert verifier.unsigned + verifier.unknown_key + verifier.bad_tag == 1


@budget(500)
@given(st.binary(max_size=200))
def test_random_bytes_raise_auth_error_only(buf):
    _, verifier = pair()
    with pytest.raises(AuthError):
        verifier.open(buf)


@budget(200)
@given(st.binary(min_size=1, max_size=200))
def test_random_bytes_behind_a_valid_tag_raise_protocol_errors_only(junk):
    """A key holder that seals garbage gets it counted as malformed, nothing worse."""
    signer, verifier = pair()
    body, _ = verifier.open(signer.seal(junk, now=T))
    try:
        decode(body)
    except ValueError:  # ProtocolError
        pass


def test_unsealed_and_wrong_key_frames_are_refused_and_counted():
    _, verifier = pair()
    other = FrameAuth(SharedKey(b"m" * 32))
    with pytest.raises(AuthError, match="not sealed"):
        verifier.open(NAK)
    with pytest.raises(AuthError, match="does not hold"):
        verifier.open(other.seal(NAK, now=T))
    forged = bytearray(other.seal(NAK, now=T))
    forged[2:6] = pair()[0].seal(NAK, now=T)[2:6]  # our key id, their tag
    with pytest.raises(AuthError, match="does not match"):
        verifier.open(bytes(forged))
    snap = verifier.snapshot()
    assert (snap["unsigned"], snap["unknown_key"], snap["bad_tag"], snap["opened"]) == (1, 1, 1, 0)


def test_a_rotated_key_is_accepted_while_listed():
    old, new = b"o" * 32, b"n" * 32
    verifier = FrameAuth(SharedKey(new, accept=(old,)))
    for key in (old, new):
        body, _ = verifier.open(FrameAuth(SharedKey(key)).seal(NAK, now=T))
        assert bytes(body) == NAK
    with pytest.raises(AuthError):
        FrameAuth(SharedKey(new)).open(FrameAuth(SharedKey(old)).seal(NAK, now=T))


def test_replays_and_stale_frames_are_refused_per_node():
    signer, verifier = pair()
    node = ("r1", 0)
    _, c1 = verifier.open(signer.seal(NAK, now=T))
    _, c2 = verifier.open(signer.seal(NAK, now=T))
    assert verifier.admit(node, c1, now=T)
    assert verifier.admit(node, c2, now=T)
    assert not verifier.admit(node, c1, now=T)  # played back
    assert not verifier.admit(node, c2, now=T + 1)  # the same frame twice
    assert verifier.admit(("r2", 0), c1, now=T)  # another node's counter
    assert verifier.admit(("r1", 7), c1, now=T)  # another epoch of r1
    _, old = verifier.open(signer.seal(NAK, now=T - 400))  # sealed 400 s ago ...
    _, ahead = FrameAuth(KEY).open(FrameAuth(KEY).seal(NAK, now=T + 400))  # ... or ahead
    assert not verifier.admit(("r3", 0), old + 10**9, now=T + 1_400)
    assert not verifier.admit(("r3", 0), ahead, now=T)
    assert (verifier.replayed, verifier.stale) == (2, 2)
    _, c3 = verifier.open(FrameAuth(KEY).seal(NAK, now=T + 5))  # r1 restarted: a new signer
    assert verifier.admit(node, c3, now=T + 5)
    unlimited = FrameAuth(SharedKey(b"k" * 32, max_age_s=None))
    assert unlimited.admit(node, 1, now=1e9)


def test_the_replay_table_is_bounded():
    verifier = FrameAuth(KEY, max_nodes=100)
    for i in range(10_000):
        assert verifier.admit((f"n{i}", 0), 5, now=0.0)
    assert verifier.snapshot()["nodes"] == 100
    assert not verifier.admit(("n9999", 0), 5, now=0.0)  # recent nodes are remembered


def test_origin_names_the_speaker_not_the_addressee():
    assert origin(Credit("s", "r1", "s1", 5, 10, 0.0)) == ("r1", 0)
    assert origin(Nak("s", "r1", 50, 50.0, 0.0)) == ("r1", 0)
    assert origin(Data("s", "s1", 3, 0, 0.0, (b"x",))) == ("s1", 3)
    assert origin(End("s", "s1", 3, 9, 0.0)) == ("s1", 3)
    assert origin(Hello("s", "s1", "sender", "nak", 3, 0, "", 0.0)) == ("s1", 3)
    assert origin(Bye("s", "r1", "receiver", 0, 0.0)) == ("r1", 0)


def test_bad_keys_are_config_errors():
    with pytest.raises(ConfigError, match="16 bytes"):
        SharedKey(b"short")
    with pytest.raises(ConfigError, match="16 bytes"):
        SharedKey(b"k" * 32, accept=(b"x",))
    with pytest.raises(ConfigError, match="max_age_s"):
        SharedKey(b"k" * 32, max_age_s=0)
    with pytest.raises(ConfigError, match="hex"):
        SharedKey.parse("not hex")
    with pytest.raises(ConfigError, match="clock"):
        FrameAuth(KEY).seal(NAK, now=1e15)


def test_keygen_shared_writes_a_private_key_once(tmp_path):
    cmd = [sys.executable, "-m", "nakflow", "keygen", "--shared", str(tmp_path), "stream"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    path = tmp_path / "stream.shared_key"
    assert path.stat().st_mode & 0o077 == 0
    key = load_shared_key(str(path))
    assert len(key.secret) == 32
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert again.returncode == 2 and "not overwriting" in again.stderr
    assert load_shared_key(str(path)) == key
    with pytest.raises(ValueError, match="shared key file"):
        load_shared_key(str(tmp_path / "missing"))
    # a file that holds no key: the error named neither the file nor how to make one
    curve = subprocess.run([sys.executable, "-m", "nakflow", "keygen", str(tmp_path), "c"],
                           capture_output=True, text=True, timeout=30)
    assert curve.returncode == 0, curve.stderr
    (tmp_path / "short.shared_key").write_text("abcd\n")
    for name, why in (("c.key_secret", "holds the key as hex digits (it is a CURVE "
                                       "certificate: those go to --curve-secret and "
                                       "--curve-server-key)"),
                      ("short.shared_key", "a shared key must be at least 16 bytes")):
        with pytest.raises(ValueError) as err:
            load_shared_key(str(tmp_path / name))
        assert str(err.value).startswith(f"shared key file {tmp_path / name}: ")
        assert why in str(err.value)
        assert str(err.value).endswith("'nakflow keygen --shared DIR NAME' makes one "
                                       "(DIR/NAME.shared_key)")


def test_keygen_writes_a_curve_pair_once_and_only_inside_its_directory(tmp_path):
    """A second ``nakflow keygen DIR NAME`` overwrote the pair (every peer holding the old
    public key was locked out); a name with a directory in it wrote outside DIR."""
    def keygen(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nakflow", "keygen", *args],
                              capture_output=True, text=True, timeout=30)

    assert keygen(str(tmp_path), "rx").returncode == 0
    public, secret = tmp_path / "rx.key", tmp_path / "rx.key_secret"
    assert secret.stat().st_mode & 0o077 == 0 and public.stat().st_mode & 0o044 == 0o044
    pair = public.read_text(), secret.read_text()
    again = keygen(str(tmp_path), "rx")
    assert again.returncode == 2 and "rx.key and rx.key_secret exist" in again.stderr
    assert (public.read_text(), secret.read_text()) == pair
    for name in ("../out", "a/b", ".."):
        for shared in ((), ("--shared",)):
            bad = keygen(*shared, str(tmp_path / "d"), name)
            assert bad.returncode == 2 and "must be a plain file name" in bad.stderr, name
    # a DIR that is a file: the error said a key existed and would not be overwritten
    (tmp_path / "plain").write_text("")
    for shared in ((), ("--shared",)):
        bad = keygen(*shared, str(tmp_path / "plain"), "k")
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.strip().endswith(f"{tmp_path / 'plain'} is not a directory")
    (tmp_path / "plain").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rx.key", "rx.key_secret"]


@budget(100)
@given(st.binary(min_size=16, max_size=100), st.binary(max_size=300))
def test_the_tag_is_hmac_sha256(key, frame):
    import hashlib
    import hmac

    sealed = FrameAuth(SharedKey(key)).seal(frame, now=T)
    want = hmac.new(key, sealed[:-16], hashlib.sha256).digest()[:16]
    assert sealed[-16:] == want
