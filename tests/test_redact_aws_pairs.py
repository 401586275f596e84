"""An AWS secret access key is found beside its key id or under a name that says it is one, in the forms
credentials travel in (the console's CSV, the CLI's INI file, STS and IAM JSON), through a run's values
and keys; a 40-character base64 string that is neither stays."""

from __future__ import annotations

import orjson
import pytest

from harvester.model import Run, ToolCall
from harvester.redact import Redactor

R = Redactor(key=None)
KEY_ID, TEMP_ID = "AKIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPL3"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

FORMS = {
    # IAM console's "Download .csv" of a new access key (with and without the user columns)
    "console csv": f"User name,Password,Access key ID,Secret access key,Console login link\r\n"
    f"deploy,,{KEY_ID},{SECRET},https://123456789012.signin.aws.amazon.com/console\r\n",
    "key csv": f"Access key ID,Secret access key\n{KEY_ID},{SECRET}\n",
    "quoted csv": f'"Access key ID","Secret access key"\n"{TEMP_ID}","{SECRET}"\n',
    "one line": f"use {KEY_ID} {SECRET} for the backup job",
    "ini": f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\nregion = eu-west-1\n",
    "ini no spaces": f"[profile ci]\naws_access_key_id={TEMP_ID}\naws_secret_access_key={SECRET}\n",
    "sts json": orjson.dumps(
        {"Credentials": {"AccessKeyId": TEMP_ID, "SecretAccessKey": SECRET, "Expiration": "2026-12-01T00:00:00Z"}}
    ).decode(),
    "iam json": orjson.dumps({"AccessKey": {"AccessKeyId": KEY_ID, "SecretAccessKey": SECRET}}).decode(),
    "snake json": orjson.dumps({"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}).decode(),
}


def _run(result: object) -> Run:
    return Run(
        trace_id="a" * 32,
        run_id="b" * 16,
        prompt="rotate the backup key",
        answer="done",
        calls=[ToolCall(name="read_file", call_id="c1", args={"path": "creds"}, result=result)],
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_secret_key_in_a_tool_result_as_text(form: str) -> None:
    out = R.redact_run(_run(FORMS[form]))
    dump = out.model_dump_json()
    assert SECRET not in dump and KEY_ID not in dump and TEMP_ID not in dump
    assert "<aws_secret:" in dump or "<secret:" in dump


@pytest.mark.parametrize("form", ["sts json", "iam json", "snake json"])
def test_a_secret_key_in_a_tool_result_as_data(form: str) -> None:
    out = R.redact_run(_run(orjson.loads(FORMS[form])))
    assert SECRET not in out.model_dump_json()
    assert isinstance(out.calls[0].result, dict)  # still data, not a placeholder for the whole result


@pytest.mark.parametrize(
    "text",
    [
        f"{KEY_ID},{SECRET}",
        f"{TEMP_ID}\t{SECRET}",
        f"id={KEY_ID} key={SECRET}",
        f"{SECRET},{KEY_ID}",  # the secret first: a hand-made CSV
        f"secret {SECRET} for id {TEMP_ID}",
    ],
)
def test_a_secret_beside_its_key_id_is_found_whatever_the_separator(text: str) -> None:
    out = R.redact_text(text)
    assert SECRET not in out and "<aws_secret:" in out and "<api_key:" in out


@pytest.mark.parametrize(
    "text",
    [
        f"commit {SECRET} reverted",  # 40 characters of base64, no id and no name beside it
        f"{KEY_ID}\nthe next line holds {SECRET}",  # the id on another line
        f"{KEY_ID.lower()} {SECRET}",  # not a key id: ids are upper case
        f"{KEY_ID} 3f786850e387550fdab836ed7e6dc881de23001b",  # a git SHA: no upper case
        f"{KEY_ID} ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMN",  # one case only
    ],
)
def test_a_40_character_string_that_is_not_a_secret_key_stays(text: str) -> None:
    out = R.redact_text(text)
    tail = text.rsplit(" ", 1)[-1]
    assert tail in out
