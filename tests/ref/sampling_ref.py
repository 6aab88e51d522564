"""transformers' sampling step in PyTorch, as generate() composes it (generation/logits_process.py):
RepetitionPenaltyLogitsProcessor, then TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, MinPLogitsWarper (min_tokens_to_keep = 1), then softmax. Written from the
library's definitions so that the tests need no transformers install."""
import torch


def sampling_probs(logits, ctx, temperature, top_k, top_p, min_p, penalty):
    """logits: (V,) float32; ctx: list of ids. Returns the (V,) distribution (greedy: one-hot)."""
    s = logits.clone().unsqueeze(0)
    if penalty != 1.0 and len(ctx):
        ids = torch.tensor([ctx], dtype=torch.long)
        score = torch.gather(s, 1, ids)
        score = torch.where(score < 0, score * penalty, score / penalty)
        s = s.scatter(1, ids, score)
    if temperature <= 0:
        out = torch.zeros_like(logits)
        out[int(torch.argmax(s[0]))] = 1.0
        return out
    if temperature != 1.0:
        s = s / temperature
    if top_k > 0:
        k = min(top_k, s.size(-1))
        s = s.masked_fill(s < torch.topk(s, k)[0][..., -1, None], float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(s, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[..., -1:] = False
        s = s.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))
    if min_p > 0:
        probs = torch.softmax(s, dim=-1)
        remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
        sorted_idx = torch.argsort(s, descending=True, dim=-1)
        sorted_remove = torch.gather(remove, 1, sorted_idx)
        sorted_remove[..., :1] = False
        s = s.masked_fill(sorted_remove.scatter(1, sorted_idx, sorted_remove), float("-inf"))
    return torch.softmax(s, dim=-1)[0]
