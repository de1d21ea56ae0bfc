// The chat-template interpreter (engine/llm/chat_template.h) against Python's jinja2 set up as
// transformers sets it up (chat_template_ref.py, project venv): real model templates (SmolLM2 as
// its GGUF file holds it, Llama 3, Llama 3.1, Llama 2, Mistral, Gemma, Zephyr, ChatML) and
// templates for each feature of the subset are rendered by both, byte for byte; where jinja2
// raises, kiln must fail too (with raise_exception's own message). Then the errors jinja2 cannot be
// asked about: malformed templates, the limits, hostile templates.
#include "engine/llm/chat_template.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/nn/state/gguf.h"
#include "engine/nn/state/mapped_file.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "tests/engine/run_command.h"

namespace kiln::llm {
namespace {

// SmolLM2-135M-Instruct's template as its GGUF file holds it, with real newline characters inside
// the string literals; kSmolLm2Escaped is the same template with \n escapes instead.
constexpr const char* kSmolLm2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
constexpr const char* kSmolLm2Escaped =
    R"J({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %})J"
    R"J({{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging )J"
    R"J(Face<|im_end|>\n' }}{% endif %})J"
    R"J({{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}})J"
    R"J({% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})J";

// Meta-Llama-3-8B-Instruct.
constexpr const char* kLlama3 =
    R"J({% set loop_messages = messages %}{% for message in loop_messages %})J"
    R"J({% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ )J"
    R"J(message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %})J"
    R"J({% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %})J"
    R"J({% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }})J"
    R"J({% endif %})J";

// Llama 3.1's structure (tools and the date line shortened).
constexpr const char* kLlama31 = R"J({{- bos_token }}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+
        message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)J";

// Mistral-7B-Instruct-v0.1.
constexpr const char* kMistral =
    R"J({{ bos_token }}{% for message in messages %})J"
    R"J({% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %})J"
    R"J({{ raise_exception('Conversation roles must alternate )J"
    R"J(user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %})J"
    R"J({{ '[INST] ' + message['content'] + ' [/INST]' }})J"
    R"J({% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }})J"
    R"J({% else %}{{ raise_exception('Only user and assistant roles are supported!') }})J"
    R"J({% endif %}{% endfor %})J";

// Llama-2-chat.
constexpr const char* kLlama2 =
    R"J({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %})J"
    R"J({% set system_message = messages[0]['content'] %}{% else %})J"
    R"J({% set loop_messages = messages %}{% set system_message = false %}{% endif %})J"
    R"J({% for message in loop_messages %})J"
    R"J({% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %})J"
    R"J({{ raise_exception('Conversation roles must alternate )J"
    R"J(user/assistant/user/assistant/...') }}{% endif %})J"
    R"J({% if loop.index0 == 0 and system_message != false %})J"
    R"J({% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %})J"
    R"J({% else %}{% set content = message['content'] %}{% endif %})J"
    R"J({% if message['role'] == 'user' %})J"
    R"J({{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }})J"
    R"J({% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }})J"
    R"J({% endif %}{% endfor %})J";

// gemma-2b-it.
constexpr const char* kGemma =
    R"J({{ bos_token }}{% if messages[0]['role'] == 'system' %})J"
    R"J({{ raise_exception('System role not supported') }}{% endif %})J"
    R"J({% for message in messages %})J"
    R"J({% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %})J"
    R"J({{ raise_exception('Conversation roles must alternate )J"
    R"J(user/assistant/user/assistant/...') }}{% endif %})J"
    R"J({% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %})J"
    R"J({% set role = message['role'] %}{% endif %})J"
    R"J({{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }})J"
    R"J({% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})J";

// zephyr-7b-beta: one statement a line, so trim_blocks and lstrip_blocks decide every newline.
constexpr const char* kZephyr = R"J({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})J";

// Qwen2-style ChatML, indented and held together by whitespace control.
constexpr const char* kChatMl = R"J({%- for message in messages %}
    {%- if loop.first and message.role != 'system' %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)J";

using Messages = std::vector<ChatMessage>;
const Messages kUser = {{"user", "Hello!"}};
const Messages kSystemChat = {{"system", "You are terse."},
                              {"user", "Hi"},
                              {"assistant", "Hello."},
                              {"user", "What is 2+2?"}};
const Messages kChat = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "  spaced out \n"}};
const Messages kBadOrder = {{"user", "a"}, {"user", "b"}};
const Messages kTricky = {
    {"user",
     "quotes ' \" backslash \\ braces {{ x }} {% if %} tab\t nl\n cr\r nbsp\u00a0 ctl\x01 del\x7f"},
    {"assistant", "Stra\u00dfe \u039f\u0394\u039f\u03a3 \xf0\x9f\x98\x80 caf\u00e9 \u200b"}};

struct Case {
  std::string name;
  std::string tmpl;
  Messages messages;
  bool add_generation_prompt = false;
  std::string bos = "<s>";
  std::string eos = "</s>";
};

std::vector<Case> ModelCases() {
  std::vector<Case> c;
  const std::pair<std::string, const char*> smol[] = {{"smollm2", kSmolLm2},
                                                      {"smollm2_escaped", kSmolLm2Escaped}};
  for (const auto& [name, t] : smol) {
    c.push_back({name + "_user", t, kUser, false});
    c.push_back({name + "_user_gen", t, kUser, true});
    c.push_back({name + "_system_gen", t, kSystemChat, true});
    c.push_back({name + "_system", t, kSystemChat, false});
    c.push_back({name + "_empty_gen", t, {}, true});
    c.push_back({name + "_tricky", t, kTricky, true});
  }
  for (bool gen : {false, true}) {
    const std::string g = gen ? "_gen" : "";
    c.push_back({"llama3_chat" + g, kLlama3, kChat, gen, "<|begin_of_text|>"});
    c.push_back({"llama3_system" + g, kLlama3, kSystemChat, gen, "<|begin_of_text|>"});
    c.push_back({"llama31_system" + g, kLlama31, kSystemChat, gen, "<|begin_of_text|>"});
    c.push_back({"llama31_chat" + g, kLlama31, kChat, gen, "<|begin_of_text|>"});
    c.push_back({"zephyr_system" + g, kZephyr, kSystemChat, gen});
    c.push_back({"zephyr_tricky" + g, kZephyr, kTricky, gen});
    c.push_back({"chatml_system" + g, kChatMl, kSystemChat, gen});
    c.push_back({"chatml_chat" + g, kChatMl, kChat, gen});
    c.push_back({"gemma_chat" + g, kGemma, kChat, gen});
  }
  c.push_back({"mistral_ok", kMistral, kChat});
  c.push_back({"mistral_tricky", kMistral, kTricky});
  c.push_back({"mistral_not_alternating", kMistral, kBadOrder});  // raises
  c.push_back({"mistral_system", kMistral, kSystemChat});         // raises
  c.push_back({"gemma_system", kGemma, kSystemChat, true});       // raises
  c.push_back({"gemma_not_alternating", kGemma, kBadOrder, true});
  c.push_back({"llama2_system", kLlama2, kSystemChat});
  c.push_back({"llama2_chat", kLlama2, kChat});
  c.push_back({"llama2_not_alternating", kLlama2, kBadOrder});
  return c;
}

// One template per feature, rendered with kSystemChat.
std::vector<std::pair<std::string, std::string>> FeatureTemplates() {
  return {
      {"loop_vars", R"J({% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ loop.index0 }}
 {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }}
 [{{ loop.previtem.role if loop.previtem is defined else '-' }}
|{{ loop.nextitem.role if not loop.last }}] {{ loop }}
{% endfor %})J"},
      {"loops", R"J({% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}
:{{ m.content }}|{% else %}no users{% endfor %}
{% for m in [] %}x{% else %}empty{% endfor %}
{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}
{{ i }}{% endfor %}
{% for a in [1, 2] %}{% for b in 'xé' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }}
;{% endfor %}
{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}
{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}{{ range(3) | list }}{{ range(5, 1, -2) | list }}
{% for m in messages %}{% if loop.index is even %}{% break %}{% endif %}{{ m.role }}{% endfor %}
)J"},
      {"set_scoping", R"J({% set y = 0 %}{% for x in [1, 2, 3] %}{{ y }}{% set y = y + 1 %}{{ y }}
,{% endfor %}{{ y }}
{% set z = 1 %}{% for x in [1, 2] %}{% if loop.first %}{% set z = 5 %}{% endif %}[{{ z }}
]{% endfor %}[{{ z }}]
{% if true %}{% set w = 'leaks' %}{% endif %}{{ w }}
{% set ns = namespace(count=0, last='') %}{% for m in messages %}{% set ns.count = ns.count + 1 %}
{% set ns.last = m.role %}{% endfor %}{{ ns.count }} {{ ns.last }} {{ ns }} {{ ns.missing }}
{% set block %}a{{ 1 + 1 }}b{% endset %}[{{ block }}]
{% set x = 9 %}{% for x in [1, 2] %}{{ x }}{% endfor %}{{ x }}
{% set messages = messages[1:] %}{{ messages | length }})J"},
      {"scopes", R"J({% for x in [] %}{% else %}{% set z = 1 %}{% endfor %}[{{ z }}]
{% set a %}{% set b = 1 %}<{{ b }}>{% endset %}{{ a }}[{{ b }}]
{% for m in messages %}{% set m = 'shadow' %}{{ m }}{% endfor %}
{% for m in messages %}{% for n in [1] %}{% set inner = m.role %}{% endfor %}[{{ inner }}
]{% endfor %}
{% set ns = namespace(items=[]) %}{% for m in messages %}{% set ns.items = ns.items + [m.role[0]] %}
{% endfor %}{{ ns.items | join('') }}
{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}
{% set café = 'unicode name' %}{{ café }}|{{ ünset }})J"},
      {"escapes", R"J({{ '\é|\777|\1|\0|\a\b\f\v\r|\'|\"' | tojson }}|{{ "\x41\u00e9\U0001f600" }}
|{{ '{{ not a tag }}' }}|{{ '%}' }}|{{ "it's" }}|{{ 'a\
b' }})J"},
      {"branches", R"J({% for m in messages %}{% if m.role == 'system' %}
S{% elif m.role == 'user' %}U{% elif m.role == 'assistant' %}A{% else %}?{% endif %}{% endfor %}
{{ 'yes' if messages else 'no' }} [{{ 'a' if false }}] {{ 'x' if 1 > 2 else 'y' if 2 > 1 else 'z' }}
{% if nothing %}1{% elif messages[0].nokey %}2{% elif 0 %}3{% else %}4{% endif %})J"},
      {"slicing", R"J({{ messages[1:] | length }} {{ messages[:-1] | length }}
 {{ messages[-1]['content'] }} {{ messages[-1].role }} {{ messages[::-1][0].role }}
 {{ messages[0:1] }}
{{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'héllo wörld'[::-1] }} {{ 'héllo'[1] }}
 {{ [1, 2, 3][-10:2] }} {{ [1, 2, 3][5:] }} {{ 'abc'[-1] }}|{{ 'abc'[5] }}|{{ messages.0.role }}
 {{ [1, 2, 3, 4, 5][4:1:-2] }} {{ 'abc'[true] }} {{ [1, 2][none:1] }})J"},
      {"filters", R"J({{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'héllo' | length }}
|{{ messages | length }}|{{ 'Straße ΟΔΟΣ' | upper }}|{{ 'ΟΔΟΣ' | lower }}|{{ 'Ab' | upper | lower }}
{{ 'quote " and \' and \\ \n\t\x01\x7f é 😀 </tag>' | tojson }}
|{{ ['a', 1, none, true, {'k': [2]}] | tojson }}|{{ messages[0] | tojson }}|{{ [] | tojson }}
|{{ {} | tojson }}
{{ [1, 2, 3] | join(', ') }}|{{ ['a', none, 2] | join }}|{{ 'abc' | join('.') }}
|{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ '' | d('e') }}
|{{ none | default('n') }}|{{ 0 | default('z', boolean=true) }}
{{ [3, 4] | first }}{{ [3, 4] | last }}{{ 'xyz' | first }}{{ 'xyz' | last }}{{ {'k': 1} | first }}
|[{{ [] | first }}]|{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}
|{{ 42 | string }}{{ none | string }}|{{ 'ab' | list }}|{{ -3 | abs }}|{{ 'x' | safe }}
|{{ [1, 2] | count }}|{{ 42 | upper }}|{{ nothing | upper }}|{{ none | trim }})J"},
      {"tests", R"J({{ messages is defined }} {{ nothing is defined }} {{ nothing is not defined }}
 {{ nothing is undefined }} {{ none is none }} {{ tools is none }} {{ tools is not none }}
 {{ documents is defined }}
{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ true is number }} {{ true is integer }}
 {{ 1 is integer }} {{ true is boolean }} {{ 1 is boolean }} {{ messages is mapping }}
 {{ messages[0] is mapping }}
{{ messages is sequence }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ nothing is sequence }}
 {{ 3 is odd }} {{ 3 is even }} {{ -3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}
 {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}
{{ messages[0].nokey is defined }} {{ messages[0].role is string }} {{ not messages is defined }}
 {{ 'x' if nothing is none else 'y' }})J"},
      {"operators", R"J({{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }}
 {{ 10 - 2 - 3 }} {{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true ~ nothing ~ [1] }} {{ [1] + [2] }}
 {{ 'ab' * 3 }} {{ 2 * [0] }} {{ 'x' * -1 }} {{ -(3) }} {{ +4 }} {{ true + 1 }} {{ - - 2 }}
{{ 1 < 2 < 3 }} {{ 1 < 3 > 2 }} {{ 3 < 2 < 5 }} {{ 'ab' < 'b' }} {{ 'é' > 'z' }}
 {{ [1, 2] < [1, 3] }} {{ [1] < [1, 0] }} {{ 1 == true }} {{ 'a' != 'b' }}
 {{ [1, [2]] == [1, [2]] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ 2 >= 2 }} {{ 3 <= 2 }}
 {{ none == none }} {{ nothing == nothing }} {{ nothing != 1 }} {{ 1 == '1' }}
{{ 'ell' in 'hello' }} {{ 'z' not in 'hello' }} {{ 2 in [1, 2] }} {{ 'role' in messages[0] }}
 {{ 1 in messages[0] }} {{ 'x' in nothing }} {{ [1] in [[1]] }} {{ not 'a' in 'abc' }}
{{ true and 'x' }}|{{ 0 or '' }}|{{ none or 'dflt' }}|{{ not 0 }}|{{ not messages }}|{{ 'a' and 0 }}
|{{ not 1 == 2 }}|{{ (1 + 2) * 3 }}|{{ 1 or nothing.attr }}|{{ 0 and nothing.attr }}
|{{ -3 | abs + 1 }})J"},
      {"printing", R"J({{ none }} {{ true }} {{ False }} {{ None }} {{ 0 }} {{ 1_000 }} {{ [] }}
 {{ {} }} {{ ['a', "it's", 'say "hi"', 'both \' "', 1, none, [true]] }}
 {{ {'k': 'v', 'n': {'x': none}, 'k': 'w'} }}
{{ messages }}
{{ 'a' 'b' "c" }} {{ '\x41\101\u00e9\U0001F600\q\\' }} {{ "tab\there" }}
 {{ ['\n', '\x01\x7f', 'é\u200b\u00a0\u2028', '\\', 'ok😀'] }} {{ 'multi
line' }} {{ '\
' }})J"},
      {"methods", R"J({{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a '.lstrip() }}
|{{ ' a  '.rstrip() }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'hello'.startswith('he') }}
{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith('lo') }}
{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}
|{{ ' a b  c '.split(none, 1) }}|{{ 'a\u00a0b'.split() }}|{{ 'a-b'.replace('-', '') }}
|{{ 'ab'.replace('', '.') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ ', '.join(['x', 'y']) }}
{{ messages[0].get('role') }} {{ messages[0].get('nope') }} {{ messages[0].get('nope', 'd') }}
 {{ messages[0].content.strip().upper() }} {{ ' \u3000x\u2003 '.strip() }})J"},
      {"undefined", R"J([{{ nothing }}]{{ nothing ~ 'a' }}{{ messages[0].nokey }}
{{ messages[0]['nokey'] }}{{ nothing | length }}{{ nothing | trim }}{{ messages[99] }}
{{ 'abc'['x'] }}{{ none.x }}{{ 5[0] }}|{% for x in nothing %}never{% endfor %}{{ 'a' in nothing }}
{{ nothing is sequence }}{{ nothing | list }}{{ nothing | join(',') }}|{{ nothing | first }}
|{{ [nothing] }}|{{ messages[0, 1] }}|{{ true or ('a' | replace('b')) }}
{{ false and (1 is none 2) }})J"},
  };
}

// Templates jinja2 rejects, at render time or (the syntax_ ones) at compile time: kiln fails too.
std::vector<std::pair<std::string, std::string>> ErrorTemplates() {
  return {
      {"undefined_attr", "{{ nothing.attr }}"},
      {"undefined_item", "{{ nothing['attr'] }}"},
      {"undefined_add", "{{ nothing + 'a' }}"},
      {"undefined_add_right", "{{ 'a' + nothing }}"},
      {"undefined_call", "{{ undefined_fn() }}"},
      {"undefined_tojson", "{{ nothing | tojson }}"},
      {"missing_key_attr", "{{ messages[0].nokey.deeper }}"},
      {"compare_types", "{{ 1 < 'a' }}"},
      {"compare_none", "{{ none < 1 }}"},
      {"str_plus_int", "{{ 'a' + 1 }}"},
      {"iterate_none", "{% for x in none %}{% endfor %}"},
      {"iterate_int", "{% for x in 5 %}{% endfor %}"},
      {"divide_by_zero", "{{ 1 // 0 }}"},
      {"no_such_method", "{{ 'abc'.nosuch() }}"},
      {"in_str_int", "{{ 1 in 'abc' }}"},
      {"in_dict_list", "{{ [1] in messages[0] }}"},
      {"in_int", "{{ 1 in 5 }}"},
      {"set_attr_on_str", "{% set x = 'a' %}{% set x.y = 2 %}"},
      {"slice_step_zero", "{{ [1][0:1:0] }}"},
      {"slice_none", "{{ tools[1:] }}"},
      {"slice_dict", "{{ messages[0][1:] }}"},
      {"slice_bound_str", "{{ messages[0].role['x':] }}"},
      {"filter_missing_argument", "{{ 'a' | replace('b') }}"},
      {"test_extra_argument", "{{ 'ab' is none not in 'x' }}"},
      {"length_int", "{{ 5 | length }}"},
      {"neg_str", "{{ -'a' }}"},
      {"raise", "{{ raise_exception('custom message ' ~ messages | length) }}"},
      {"raise_in_loop",
       "{% for m in messages %}{% if loop.index == 3 %}{{ raise_exception(m.content) }}{% endif %}"
       "{{ m.role }}{% endfor %}"},
      {"syntax_unclosed_if", "{% if true %}x"},
      {"syntax_unknown_tag", "{% frobnicate %}"},
      {"syntax_unbalanced", "{{ (1 + 2 }}"},
      {"syntax_elif_after_else", "{% if a %}{% else %}{% elif b %}{% endif %}"},
      {"syntax_empty_print", "{{ }}"},
      {"syntax_unknown_filter", "{{ 1 | frobnicate }}"},
      {"syntax_break_outside_loop", "{% break %}"},
      {"syntax_inline_if_in_if", "{% if 1 if 1 else 2 %}x{% endif %}"},
  };
}

// jinja2's handling of whitespace: trim_blocks, lstrip_blocks, -, +, newlines.
std::vector<std::pair<std::string, std::string>> WhitespaceTemplates() {
  return {
      {"ws_lstrip_trim", "a  \n  {% if true %}\n  x\n  {% endif %}\n  b"},
      {"ws_no_lstrip_after_print", "{{ 1 }}  {% if true %}y{% endif %}"},
      {"ws_comment_line", "line\n    {# comment #}\n  next\n"},
      {"ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc\n  {#+ c #}\nd"},
      {"ws_minus", "a   {%- if true -%}   b   {%- endif -%}   \n c"},
      {"ws_print_minus", "x {{- ' y ' -}} z\n{{ 'w' }}\n"},
      {"ws_crlf", "\r\n{% if true %}\r\nA\r\n{% endif %}\r\nB\rC\r\n\r\n"},
      {"ws_unicode_space",
       "\t \u00a0{% if true %}nbsp{% endif %}\n  \u2003{% if true %}em{% endif %}\n"
       "\u200b{% if true %}zw{% endif %}"},
      {"ws_loop_lines", "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n"},
      {"ws_comments", "{{ 'a' }}\n{# c #}\n{{ 'b' }}{#- x -#}  \n  {{ 'c' }}\n  {#- y #}z"},
      {"ws_text_then_tag", "{% if true %}   \nX{% endif %}"},
      {"ws_second_tag_on_line", "  {% if true %}A{% endif %}  {% if true %}B{% endif %}"},
      {"ws_blank_lines", "{%- if true %}\n\n  x{% endif -%}\n\n"},
      {"ws_stray_braces", "{ not a tag } {x} }} %} #} {\n{"},
      {"ws_two_trailing_newlines", "x\n\n"},
      {"ws_only_newline", "\n"},
      {"ws_set_line", "a\n    {% set x = 1 %}\n    {{ x }}\n"},
      {"ws_brackets_hold_end",
       "{{ {'a': 1}['a'] }}{{ [1, 2][0] -}}  \n|{% if (1 -\n 1) == 0 %}eq{% endif %}"},
      {"ws_minus_into_newlines", "a\n\n  {{- 'b' -}}\n\n  c"},
      {"ws_comment_trim_then_lstrip", "{# a #}\n    {% if true %}x{% endif %}"},
      {"ws_minus_comment", "a {#- c -#} b"},
  };
}

std::string WriteCases(const std::vector<Case>& cases) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  const auto str = [&](const std::string& s) {
    w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  };
  w.StartArray();
  for (const Case& c : cases) {
    w.StartObject();
    w.Key("template");
    str(c.tmpl);
    w.Key("messages");
    w.StartArray();
    for (const ChatMessage& m : c.messages) {
      w.StartObject();
      w.Key("role");
      str(m.role);
      w.Key("content");
      str(m.content);
      w.EndObject();
    }
    w.EndArray();
    w.Key("add_generation_prompt");
    w.Bool(c.add_generation_prompt);
    w.Key("bos");
    str(c.bos);
    w.Key("eos");
    str(c.eos);
    w.EndObject();
  }
  w.EndArray();
  std::string path = absl::StrCat(::testing::TempDir(), "/chat_template_cases_", getpid(), ".json");
  std::ofstream(path, std::ios::binary) << buf.GetString();
  return path;
}

std::string RunPython(const std::string& args) {
  return test_util::RunCommand(absl::StrCat(KILN_TEST_PYTHON, " ", KILN_CHAT_TEMPLATE_REF, " ", args));
}

std::vector<Case> AllCases() {
  std::vector<Case> cases = ModelCases();
  for (const auto& [name, t] : FeatureTemplates()) cases.push_back({name, t, kSystemChat, true});
  for (const auto& [name, t] : WhitespaceTemplates()) cases.push_back({name, t, kChat, false});
  for (const auto& [name, t] : ErrorTemplates()) cases.push_back({name, t, kSystemChat, false});
  return cases;
}

TEST(ChatTemplate, RendersAsJinja2) {
  const std::vector<Case> cases = AllCases();
  const std::string path = WriteCases(cases);
  const std::string ref = RunPython(path);
  std::filesystem::remove(path);
  rapidjson::Document d;
  d.Parse(ref.data(), ref.size());
  ASSERT_FALSE(d.HasParseError()) << ref.substr(0, 4000);
  ASSERT_TRUE(d.IsArray());
  ASSERT_EQ(d.Size(), cases.size());
  int ok = 0, errors = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const rapidjson::Value& r = d[static_cast<rapidjson::SizeType>(k)];
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(c.tmpl);
    absl::StatusOr<std::string> got =
        t.ok() ? t->Render(c.messages, c.add_generation_prompt, c.bos, c.eos)
               : absl::StatusOr<std::string>(t.status());
    if (r.HasMember("ok")) {
      const std::string want(r["ok"].GetString(), r["ok"].GetStringLength());
      ASSERT_TRUE(got.ok()) << c.name << ": jinja2 renders it, kiln: " << got.status()
                            << "\nwant: " << want;
      EXPECT_EQ(*got, want) << c.name;
      ++ok;
    } else {
      const std::string error(r["error"].GetString(), r["error"].GetStringLength());
      EXPECT_FALSE(got.ok()) << c.name << ": jinja2 raises " << error << ", kiln renders:\n"
                             << *got;
      if (got.ok()) continue;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
      if (r["raised"].GetBool()) {  // raise_exception(msg): msg is the whole message
        EXPECT_EQ(got.status().message(), r["message"].GetString()) << c.name;
      }
      ++errors;
    }
  }
  // Most cases render; the raising ones are the model templates' checks and ErrorTemplates().
  EXPECT_GT(ok, 60);
  EXPECT_GE(errors, static_cast<int>(ErrorTemplates().size()) + 5);
}

TEST(ChatTemplate, SmolLm2GgufHoldsTheTemplateTested) {
  if (!std::filesystem::exists(KILN_SMOLLM2_GGUF))
    GTEST_SKIP() << KILN_SMOLLM2_GGUF << " is missing";
  absl::StatusOr<nn::MappedFile> m = nn::MappedFile::Open(KILN_SMOLLM2_GGUF);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<nn::GgufFile> f = nn::ParseGguf(m->view());
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::string> t = f->GetString("tokenizer.chat_template");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, kSmolLm2);
  absl::StatusOr<ChatTemplate> ct = ChatTemplate::Parse(*t);
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ(*ct->Render(kUser, true, "", ""),
            "<|im_start|>system\n"
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
}

// Parse errors: InvalidArgument naming the construct and where it is.
TEST(ChatTemplate, MalformedTemplatesAreInvalidArgument) {
  std::string deep_if, deep_parens = "{{ ", deep_not = "{{ ", long_chain = "{{ x";
  for (int k = 0; k < 100; ++k) deep_if += "{% if true %}";
  for (int k = 0; k < 100; ++k) deep_if += "{% endif %}";
  deep_parens += std::string(100, '(') + "1" + std::string(100, ')') + " }}";
  for (int k = 0; k < 1000; ++k) deep_not += "not ";
  deep_not += "x }}";
  for (int k = 0; k < 300; ++k) long_chain += ".a";
  long_chain += " }}";
  const std::pair<std::string, std::string> cases[] = {
      {"{% if x %}abc", "'{% if %}' at byte 0 has no '{% endif %}'"},
      {"ab{% for x in y %}{% if x %}{% endfor %}", "unexpected '{% endfor %}' at byte 28"},
      {"{{ x ", "unclosed '{{' at byte 0"},
      {"x{% if y ", "unclosed '{%' at byte 1"},
      {"{# x", "unclosed comment '{#' at byte 0"},
      {"abc{% foo %}", "unknown tag 'foo' at byte 3"},
      {"a\r\nb\r\n{% foo %}", "unknown tag 'foo' at byte 6"},
      {"{% macro m() %}{% endmacro %}", "unsupported tag 'macro'"},
      {"{% raw %}x{% endraw %}", "unsupported tag 'raw'"},
      {"{{ (a }}", "unbalanced '}', expected ')' at byte 6"},
      {"{{ a) }}", "unbalanced ')' at byte 4"},
      {"{{ [1, 2) }}", "unbalanced ')', expected ']'"},
      {"{% endfor %}", "unexpected '{% endfor %}'"},
      {"{% if a %}{% else %}{% elif b %}{% endif %}", "unexpected '{% elif %}'"},
      {"{{ }}", "unexpected '}}', expected an expression at byte 3"},
      {"{{ x | nosuchfilter }}", "unsupported filter 'nosuchfilter' at byte 7"},
      {"{{ x is nosuchtest }}", "unsupported test 'nosuchtest'"},
      {"{{ 1.5 }}", "float literals are not supported at byte 3"},
      {"{{ 0x1f }}", "non-decimal integer literals are not supported"},
      {"{{ 99999999999999999999 }}", "integer literal over 64 bits"},
      {"{{ 'abc }}", "unterminated string literal at byte 3"},
      {"{{ '\\x4' }}", "truncated \\x, \\u or \\U escape"},
      {"{% break %}", "'break' outside a loop"},
      {"{% for a, b in x %}{% endfor %}", "more than one loop variable"},
      {"{% for x in y recursive %}{% endfor %}", "recursive loops"},
      {"{{ a / b }}", "unsupported operator '/'"},
      {"{{ a ** b }}", "unsupported operator '**'"},
      {"{{ (1, 2) }}", "tuples"},
      {"{{ a[1, 2:] }}", "slices in a tuple subscript"},
      {"{{ a @ b }}", "unexpected character '@'"},
      {"ab\n{% set x %}a", "'{% set %}' at byte 3 has no '{% endset %}'"},
      {"{{ x }", "unbalanced '}' at byte 5"},
      {deep_if, "nesting deeper than 64 (kMaxNesting)"},
      {deep_parens, "nesting deeper than 64 (kMaxNesting)"},
      {deep_not, "nesting deeper than 64 (kMaxNesting)"},
      {long_chain, "expression deeper than 256 (kMaxExpressionDepth)"},
      {std::string(ChatTemplate::kMaxSourceBytes + 1, 'x'),
       "over the 65536-byte limit (kMaxSourceBytes)"},
  };
  for (const auto& [source, want] : cases) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    ASSERT_FALSE(t.ok()) << source.substr(0, 200);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(t.status().message(), want))
        << t.status() << "\n  want: " << want;
  }
  // Within the limits: 60 nested blocks and a 200-term concatenation parse and render.
  std::string nested, chain = "{{ 'a'";
  for (int k = 0; k < 60; ++k) nested += "{% if true %}";
  nested += "in";
  for (int k = 0; k < 60; ++k) nested += "{% endif %}";
  for (int k = 0; k < 200; ++k) chain += " ~ 'a'";
  chain += " }}";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(nested);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render({}, false, "", ""), "in");
  t = ChatTemplate::Parse(chain);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render({}, false, "", ""), std::string(201, 'a'));
}

absl::Status RenderStatus(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(kSystemChat, true, "<s>", "</s>").status();
}

// Hostile templates stop at a named limit, quickly and without recursing on the stack.
TEST(ChatTemplate, LimitsStopHostileTemplates) {
  const std::pair<std::string, std::string> cases[] = {
      {"{% for i in range(2000) %}{{ 'x' * 1000 }}{% endfor %}", "(kMaxOutputBytes)"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "(kMaxSteps)"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}",
       "(kMaxOutputBytes)"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
       "{% endfor %}",
       "(kMaxListItems)"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
       "{% endfor %}"
       "{{ ns.l }}",
       "(kMaxOutputBytes)"},
      {"{{ '' * 999999999999 }}{{ [] * 999999999999 }}{{ 'x' * 999999999999 }}",
       "(kMaxOutputBytes)"},
      {"{{ [1] * 999999999999 }}", "(kMaxListItems)"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
       "{% endfor %}"
       "{{ ns.l == [ns.l[0], ns.l[1]] }}",
       "(kMaxSteps)"},
      {"{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested deeper than 64"},
      {"{% set ns = namespace() %}{% set ns.me = [ns] %}{{ [ns] | tojson }}",
       "not JSON serializable"},
      {"{% set ns = namespace(d={}) %}{% for i in range(100) %}{% set ns.d = {'d': ns.d} %}"
       "{% endfor %}"
       "{{ ns.d | tojson }}",
       "nested deeper than 64"},
      {"{{ 'x' * 2000000 }}", "(kMaxOutputBytes)"},
      {"{{ range(1000000) }}", "over 100000 items"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
  };
  for (const auto& [source, want] : cases) {
    absl::Status st = RenderStatus(source);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_TRUE(absl::StrContains(st.message(), want))
        << source << "\n  " << st << "\n  want: " << want;
  }
  // A namespace that holds itself is still readable where nothing recurses.
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}{{ ns == ns.me }}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render({}, false, "", ""), "1True");
}

TEST(ChatTemplate, RuntimeErrorsNameTheProblem) {
  absl::Status st = RenderStatus("{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "Conversation roles must alternate");
  st = RenderStatus("ab{{ nothing.attr }}");
  EXPECT_TRUE(absl::StrContains(st.message(), "'nothing' is undefined at byte 12")) << st;
  st = RenderStatus("{{ messages[0].nokey + 'x' }}");
  EXPECT_TRUE(absl::StrContains(st.message(), "'dict object' has no attribute 'nokey'")) << st;
  st = RenderStatus("{{ 1 < 'a' }}");
  EXPECT_TRUE(
      absl::StrContains(st.message(), "'<' not supported between instances of 'int' and 'str'"))
      << st;
}

// A parsed template is immutable: copies and threads render the same text.
TEST(ChatTemplate, RendersConcurrently) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(kChatMl);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string want = *t->Render(kSystemChat, true, "", "");
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k) {
    threads.emplace_back([&, k, copy = *t] {
      for (int n = 0; n < 50; ++n) got[k] = *copy.Render(kSystemChat, true, "", "");
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& g : got) EXPECT_EQ(g, want);
}

// Random edits of every template of the suite: each parses or fails with InvalidArgument, and
// renders or fails with InvalidArgument; none crashes (run under ASan in the asan preset).
TEST(ChatTemplate, MutatedTemplatesNeverCrash) {
  std::vector<std::string> seeds;
  for (const Case& c : AllCases()) seeds.push_back(c.tmpl);
  std::mt19937 rng(24);
  const std::string alphabet = "{}%#-+()[]'\"\\.|~:,=<>! \n\tabxyz019_ifendforsetisnotin\xc3\xa9";
  int rendered = 0;
  for (int n = 0; n < 4000; ++n) {
    std::string s = seeds[rng() % seeds.size()];
    for (int edits = 1 + rng() % 4; edits > 0; --edits) {
      const size_t at = s.empty() ? 0 : rng() % s.size();
      switch (rng() % 4) {
        case 0: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (!s.empty()) s.erase(at, 1 + rng() % 3); break;
        case 2: if (!s.empty()) s[at] = alphabet[rng() % alphabet.size()]; break;
        default: s.insert(at, s.substr(rng() % (s.size() + 1), rng() % 16)); break;
      }
    }
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(s);
    if (!t.ok()) {
      ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << s;
      continue;
    }
    absl::StatusOr<std::string> r = t->Render(kTricky, true, "<s>", "</s>");
    if (r.ok()) ++rendered;
    else ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << s;
  }
  EXPECT_GT(rendered, 100);
}

}  // namespace
}  // namespace kiln::llm
