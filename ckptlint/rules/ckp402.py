"""CKP402: a point-to-point op, or an all-to-all with split sizes the region computes, inside a region."""

from ckptlint.analysis.regions.summary import PEER_EXCHANGE
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule

_HANG = "a rank whose recompute differs, or whose peer does not recompute, blocks"


class PeerExchangeInRegion(RegionRule):
    code = "CKP402"
    name = "peer-exchange-in-region"
    summary = "The region sends or receives point-to-point (`send`, `recv`, `isend`, `irecv`, `batch_isend_irecv`), or runs an all-to-all whose split sizes it computes."
    explanation = """
        The replay at recompute repeats everything the region did, including its exchanges
        with other ranks. A point-to-point receive inside a checkpointed region waits again
        for a message in backward, and only arrives if the peer sends it again at the same
        moment: pipeline stages whose recomputes do not line up, or a peer that does not
        checkpoint the matching region, block forever. An all-to-all whose split sizes the
        region computes (MoE token dispatch with `output_split_sizes` from `.tolist()` of the
        routing counts) is the same risk: every rank must compute the same sizes again in
        its replay and enter the exchange together, or the exchange hangs or mismatches.

        An all-to-all whose split sizes are None, literals, or come in from outside the
        region (an input, an attribute) is CKP401 instead. A selective-checkpoint policy that
        saves the functional collective's `_c10d_functional` op keeps it from replaying.
    """
    bad = """
        import torch
        import torch.distributed as dist
        from torch.utils.checkpoint import checkpoint


        class ExpertDispatch(torch.nn.Module):
            def forward(self, tokens, counts):
                splits = counts.tolist()  # tokens per expert rank, from the router
                out = torch.empty_like(tokens)
                dist.all_to_all_single(out, tokens, output_split_sizes=splits, input_split_sizes=splits)
                return self.experts(out)


        class MoE(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dispatch = ExpertDispatch()

            def forward(self, tokens, counts):
                return checkpoint(self.dispatch, tokens, counts, use_reentrant=False)
    """
    good = """
        import torch
        import torch.distributed as dist
        from torch.utils.checkpoint import checkpoint


        class ExpertDispatch(torch.nn.Module):
            def forward(self, tokens, counts):
                splits = counts.tolist()  # tokens per expert rank, from the router
                out = torch.empty_like(tokens)
                dist.all_to_all_single(out, tokens, output_split_sizes=splits, input_split_sizes=splits)
                return out


        class MoE(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dispatch = ExpertDispatch()

            def forward(self, tokens, counts):
                routed = self.dispatch(tokens, counts)  # exchange outside the region
                return checkpoint(self.experts, routed, use_reentrant=False)
    """
    remedy = """
        Exchange outside the checkpointed region: dispatch tokens before the call and combine
        after it, checkpointing only the expert or stage compute. Where the exchange has to
        stay inside, use the functional collective (`funcol.all_to_all_single`) with a
        selective-checkpoint policy saving `torch.ops._c10d_functional.all_to_all_single.default`,
        so the replay reuses the forward's result instead of exchanging again.
    """
    confirmed_by = frozenset({"communication", "hang"})
    kinds = frozenset({PEER_EXCHANGE})
    messages = {
        "point-to-point": "`{callee}()` is a point-to-point {family} inside the region: hang risk: the replay repeats "
        "it at recompute; " + _HANG,
        "computed-splits": "`{callee}()` is an all-to-all whose split sizes (`{splits}`) the region computes: hang risk: "
        "the replay repeats the data-dependent exchange at recompute; " + _HANG,
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        return not effect.saved_by(call.saved_ops)
