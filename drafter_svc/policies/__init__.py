"""Draft-length policies: how deep each round's token tree goes, chosen per round.

Each round the drafter drafts at most the request's draft length (a model drafter stops earlier
where its session's policy says the next step would not pay) and the policy cuts the tree to the
depth d it chooses, with the node budget scaled in proportion (depth_math.scaled_nodes). One
class per policy (draft_length_policy.DraftLengthPolicy), chosen by name (registry.py); what a
session has learned and what its rounds cost is session_estimates.py; what a drafter process
learns across sessions is policy_state.py. docs/concepts/draft-length-policies.md describes the
policies; docs/design/draft-policy-rules.md the measurements behind their rules.
"""
