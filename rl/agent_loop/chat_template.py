"""ragym's Qwen-style (ChatML) chat template for the tiny policies.

Written for ragym, not copied: it renders the same scaffold as the Qwen2.5-VL / Qwen3-VL templates
(``<|im_start|>role\\n...<|im_end|>\\n``, a default system turn, images as
``<|vision_start|><|image_pad|><|vision_end|>`` that the processor expands to one pad per merged
patch, tool results wrapped in ``<tool_response>`` inside a user turn), so verl's Qwen continuous-token
builder and the real checkpoints see identical structure.
"""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
"""System text rendered when the conversation does not start with a system message."""

_CONTENT = (
    "{% macro render(content) %}"
    "{% if content is string %}{{ content }}"
    "{% else %}{% for part in content %}"
    "{% if part['type'] in ['image', 'image_url'] or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{% endmacro %}"
)

CHAT_TEMPLATE = (
    _CONTENT + "{% if messages[0]['role'] != 'system' %}"
    "<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ render(message['content']) }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ render(message['content']) }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The Jinja chat template saved with every tiny policy (tokenizer and processor)."""
