# Cells for notebooks/07_training.ipynb, section 2: insert right after the static cross-attention
# picture (the cell ending in `fig` that draws "decoder cross-attention, layer {best_layer}"), before
# "## 3. A character-level language model". Percent format (tools/nbpercent.py). The lead deletes
# this file after inserting.

# %% [markdown]
# ### Your own digits: the cross-attention explorer
#
# Type digits into the box. The model writes its own output with `greedy_decode` (the status line
# says what it wrote and whether that is the reverse), and the explorer shows the cross-attention
# for **that** output. Left: every layer × head (rows: layers), the selected one framed in red.
# Middle: the selected head large, your digits along the bottom, what the model writes down the
# side; the dashed line is the anti-diagonal that a reversal needs. Choose an output row with the
# slider: the bars on the right are that row's weights, and the orange bar is the input digit the
# reverse has to copy there. The model was trained on exactly `N_DIGITS` digits, so other
# characters are skipped, a shorter input is padded with 0s and a longer one is cut; the status
# line says which digits were used. Try a run of one repeated digit, such as `77777777`: the
# digits no longer tell the positions apart. Does the attention still follow the anti-diagonal?

# %%
from helpers.widgets import cross_attention_explorer

cross_view = cross_attention_explorer(rev_model, source="31415926535897932384"[:N_DIGITS])
cross_view

# %%
my_src = torch.tensor([[int(d) for d in cross_view.used]])                         # (1, n)
my_out = rev_model.greedy_decode(my_src, max_len=N_DIGITS + 2, bos_id=BOS, eos_id=EOS)  # (1, n + 2)
_, my_weights = rev_model(my_src, my_out[:, :-1], return_weights=True)             # the model's own numbers
check_close("explorer's weights vs decoder_cross", cross_view.weights, my_weights.decoder_cross[:, 0], atol=1e-6)
assert cross_view.correct and cross_view.written == cross_view.used[::-1] + "<EOS>"
reads = cross_view.weights[:, :, :N_DIGITS].argmax(dim=-1)          # (L, H, n): the input each digit row reads most
assert (reads == torch.arange(N_DIGITS - 1, -1, -1)).all(dim=-1).any(), "some head reads the anti-diagonal"
