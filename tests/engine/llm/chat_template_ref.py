"""Reference renderings for chat_template_test: Python's jinja2, set up as Hugging Face transformers
sets it up in apply_chat_template (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
the loopcontrols extension, a raise_exception global raising TemplateError, tojson as
json.dumps(ensure_ascii=False), and the variables messages, add_generation_prompt, bos_token,
eos_token, tools=None, documents=None); nothing here comes from kiln.

  chat_template_ref.py CASES.json

CASES.json is a list of {"template", "messages": [{"role", "content"}], "add_generation_prompt",
"bos", "eos"}. Prints one JSON list, an entry per case: {"ok": rendering}, or {"error": "Type:
message", "message": message, "raised": whether the template called raise_exception (message is
then its argument)}; a template jinja2 cannot compile is an error too. Run with the project venv
(jinja2 3.1).
"""
import json
import sys
import warnings

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: jinja2's own tojson escapes HTML characters.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env: ImmutableSandboxedEnvironment, case: dict) -> dict:
    try:
        template = env.from_string(case["template"])
        return {"ok": template.render(messages=case["messages"],
                                      add_generation_prompt=case["add_generation_prompt"],
                                      bos_token=case["bos"], eos_token=case["eos"],
                                      tools=None, documents=None)}
    except jinja2.exceptions.TemplateError as e:  # syntax errors and undefined use are subclasses
        return {"error": f"{type(e).__name__}: {e}", "message": str(e),
                "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:  # TypeError, ValueError, ... of the Python operations a template runs
        return {"error": f"{type(e).__name__}: {e}", "message": str(e), "raised": False}


def main() -> None:
    warnings.simplefilter("ignore")  # compiled templates may warn on stderr, which the test reads
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    print(json.dumps([render(env, c) for c in cases], ensure_ascii=True))


if __name__ == "__main__":
    main()
