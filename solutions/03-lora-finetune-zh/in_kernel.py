"""Lab 03's kernel-side helpers: what its checks run in a kernel (``learner.run`` in the
learner's, ``reference.run`` in the reference kernel), over that kernel's names. A name read here
without binding is the notebook's: the learner's ``lora_param_count``, ``peft_model`` and
``merged_model``, or in the reference kernel the solution's ``tokenizer``, ``peft_model``,
``mean_loss`` and ``dev_samples``. Each returns its answers as plain data; the checks judge them."""

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import Qwen2Config


def lora_count(config, r, targets=None):
    """``lora_param_count`` of the Qwen2 config made from the dict ``config``."""
    if targets is None:
        return lora_param_count(Qwen2Config(**config), r)
    return lora_param_count(Qwen2Config(**config), r, tuple(targets))


def template_tokens(messages):
    """The chat template's tokens of ``messages`` as ``build_sft_sample``'s contract counts them:
    the whole sample without its trailing newline, the prompt's length with the generation prompt,
    the answer's length, the ids of <|im_end|> and of the pad token."""

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    full = tokenizer.apply_chat_template(messages, tokenize=False).rstrip("\n")
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    return {
        "full": ids(full),
        "prompt": len(ids(prompt)),
        "answer": len(ids(messages[-1]["content"])),
        "end": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad": tokenizer.pad_token_id,
    }


def adapter_weights():
    """``peft_model``'s adapter tensors, as ``save_pretrained`` names them, on the CPU."""
    return {k: v.detach().cpu() for k, v in get_peft_model_state_dict(peft_model).items()}


def adapter_shapes():
    return {k: list(v.shape) for k, v in get_peft_model_state_dict(peft_model).items()}


def saved_weights(path):
    """The tensors of the safetensors file at ``path`` (the course build's adapter)."""
    return load_file(path)


def _with_adapter(weights, measure):
    """``measure()`` with the adapter ``weights`` in ``peft_model``, its own weights restored after."""
    own = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    try:
        set_peft_model_state_dict(peft_model, {k: v.to(own[k].device, own[k].dtype) for k, v in weights.items()})
        with torch.no_grad():
            return measure()
    finally:
        set_peft_model_state_dict(peft_model, own)


def dev_loss_with(weights):
    """The dev loss of ``peft_model`` carrying the adapter ``weights``."""
    return _with_adapter(weights, lambda: mean_loss(peft_model, dev_samples))


def _in_eval_mode(measure):
    was_training = peft_model.training
    peft_model.eval()
    try:
        return measure()
    finally:
        peft_model.train(was_training)


def logits_with(weights, ids):
    """``peft_model``'s logits of ``ids`` (in eval mode), carrying the adapter ``weights``."""
    return _with_adapter(
        weights, lambda: _in_eval_mode(lambda: peft_model(input_ids=ids.to(device)).logits.float().cpu())
    )


def reports_with(weights):
    """The course's ``generate_reports`` of ``peft_model`` (in eval mode) carrying the adapter
    ``weights``, on the lab's ``EVAL_SUBSET``: what that adapter answers."""
    return _with_adapter(weights, lambda: _in_eval_mode(lambda: generate_reports(peft_model, EVAL_SUBSET)))


def logits_of_merged(ids):
    """``merged_model``'s logits of ``ids``."""
    with torch.no_grad():
        return merged_model(input_ids=ids.to(device)).logits.float().cpu()


def parameters_of_merged(names):
    """``merged_model``'s parameters ``names`` (a plain model's names), in float32 on the CPU."""
    return {name: merged_model.get_parameter(name).detach().float().cpu() for name in names}


def merged_parameters(weights, names):
    """The parameters ``names`` (the plain model's names) of ``peft_model`` carrying the adapter
    ``weights``, merged: a LoRA layer's weight is its base weight plus peft's delta
    (``get_delta_weight``), any other parameter is the base model's; float32 on the CPU."""

    def merged():
        base, out = peft_model.get_base_model(), {}
        for name in names:
            module_name, _, leaf = name.rpartition(".")
            module = base.get_submodule(module_name)
            value = getattr(getattr(module, "base_layer", module), leaf)  # a LoRA layer wraps the plain one
            if leaf == "weight" and hasattr(module, "get_delta_weight"):
                value = value + module.get_delta_weight(peft_model.active_adapter)
            out[name] = value.detach().float().cpu()
        return out

    return _with_adapter(weights, merged)


def _names_under(model, modules):
    """The parameter names under each submodule of ``modules`` ("" is the model), read with
    ``torch.nn.Module``'s own methods: an instance's ``named_parameters`` may say anything."""
    module = torch.nn.Module
    return {m: [n for n, _ in module.named_parameters(module.get_submodule(model, m))] for m in modules}


def merged_names_under(modules):
    """``merged_model``'s parameter names under ``modules`` (a LoRA layer holds ``base_layer``,
    ``lora_A``, ``lora_B``; the plain layer only ``weight`` and maybe ``bias``)."""
    return _names_under(merged_model, modules)


def plain_names_under(modules):
    """The same of the lab's model without an adapter (``fresh_base``: the solution's merge unloads
    its LoRA layers, so it holds the plain layers again)."""
    return _names_under(fresh_base, modules)


def _dropout_sites(model):
    """``(module, attribute)`` of every dropout rate in ``model``: ``nn.Dropout`` layers' ``p`` and
    the attention layers' ``attention_dropout`` (transformers' Qwen2 applies it in training mode only)."""
    sites = []
    for m in torch.nn.Module.modules(model):
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            sites.append((m, "p"))
        elif type(getattr(m, "attention_dropout", None)) is float:
            sites.append((m, "attention_dropout"))
    return sites


def dropout_sites():
    """How many dropout rates the lab's merged model has (the reference's ``fresh_base``)."""
    return len(_dropout_sites(fresh_base))


def logits_of_merged_under_dropout(ids, p):
    """``(dropout rates raised, [logits, logits])``: ``merged_model``'s logits of ``ids`` twice,
    with every dropout rate of the model set to ``p`` for those passes, then put back. In eval
    mode no dropout applies and both equal the adapter model's; in training mode each pass drops
    its own random part."""
    sites = _dropout_sites(merged_model)
    saved = [getattr(m, name) for m, name in sites]
    try:
        for m, name in sites:
            setattr(m, name, p)
        with torch.no_grad():
            passes = [merged_model(input_ids=ids.to(device)).logits.float().cpu() for _ in range(2)]
    finally:
        for (m, name), value in zip(sites, saved):
            setattr(m, name, value)
    return len(sites), passes


def batch_logits(ids, mask):
    """``peft_model``'s logits of a padded batch, as they are (the real batch's loss)."""
    with torch.no_grad():
        return peft_model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.cpu()


def loss_of(logits, labels):
    """The learner's ``causal_lm_loss`` of the logits and labels, on the lab's ``device``."""
    return causal_lm_loss(logits.to(device), labels.to(device)).cpu()
