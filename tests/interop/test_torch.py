"""rl.from_torch: PyTorch modules read through torch.export. Outputs and parameter gradients
equal PyTorch's (float64) for an MLP, a CNN (conv, batch norm in eval mode, pooling, layer
norm) and an embedding + LSTM cell; parameters lead @main in named_parameters() order."""
import numpy as np
import pytest

import relayish as rl

torch = pytest.importorskip("torch")
nn = torch.nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        return torch.log_softmax(self.fc2(torch.tanh(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2)
        self.fc = nn.Linear(4, 3)
        self.ln = nn.LayerNorm(3)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        h = nn.functional.avg_pool2d(nn.functional.gelu(self.conv2(h)), 1)
        h = nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.ln(self.fc(h)).sigmoid()


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.cell = nn.LSTMCell(4, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, ids, h, c):
        for t in range(ids.shape[1]):
            h, c = self.cell(self.embed(ids[:, t]), (h, c))
        return self.out(h).sum(dim=1) + c.mean()


class Reordered(nn.Module):
    """Parameters registered in an order other than forward's: named_parameters() lists the
    module's own `scale` first, then `out` (used last), then `inp`."""
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(5, 2)
        self.inp = nn.Linear(3, 5)
        self.scale = nn.Parameter(torch.tensor([1.5, -0.5]))

    def forward(self, x):
        return self.scale * self.out(torch.tanh(self.inp(x)))


class SharedLayer(nn.Module):
    """One layer used twice, a buffer added, batch norm's statistics (buffers too)."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("offset", torch.tensor([0.1, 0.2, 0.3, 0.4]))
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(torch.tanh(self.lin(x) + self.offset)))


class Tied(nn.Module):
    """Two layers sharing one weight object: named_parameters() lists it once, as a.weight,
    while torch.export's graph reads it under b.weight."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _shared():
    torch.manual_seed(3)
    m = SharedLayer().double()
    with torch.no_grad():
        m.bn.running_mean.copy_(torch.randn(4) * 0.1)
        m.bn.running_var.copy_(torch.rand(4) + 0.5)
    return m.eval()


def _cnn():
    torch.manual_seed(0)
    m = CNN().double()
    with torch.no_grad():        # statistics other than the initial ones, so eval mode shows
        m.bn.running_mean.copy_(torch.randn(4) * 0.1)
        m.bn.running_var.copy_(torch.rand(4) + 0.5)
    return m.eval()


def _cases():
    torch.manual_seed(1)
    ids = torch.tensor([[1, 4, 7], [2, 2, 9]])
    return [
        ("mlp", lambda: MLP().double(), (torch.randn(5, 4, dtype=torch.float64),)),
        ("cnn", _cnn, (torch.randn(2, 1, 8, 8, dtype=torch.float64),)),
        ("embedding_lstm", lambda: Recurrent().double(),
         (ids, torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64))),
        ("reordered_parameters", lambda: Reordered().double(),
         (torch.randn(6, 3, dtype=torch.float64),)),
        ("shared_layer_buffer_bn", _shared, (torch.randn(6, 4, dtype=torch.float64),)),
        ("tied_weights", lambda: Tied().double(), (torch.randn(6, 4, dtype=torch.float64),)),
    ]


CASES = _cases()


@pytest.mark.parametrize("name,make,inputs", CASES, ids=[c[0] for c in CASES])
def test_outputs_and_parameter_gradients_equal_pytorch(name, make, inputs):
    torch.manual_seed(2)
    module = make()
    mod = rl.from_torch(module, inputs)
    params = [p.detach().numpy() for _, p in module.named_parameters()]
    args = params + [x.numpy() for x in inputs]
    out = module(*inputs)
    np.testing.assert_allclose(rl.evaluate(mod, *args), out.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    # the gradient of the sum of the outputs (rl.gradient seeds the outputs with ones)
    out.sum().backward()
    _, grads = rl.evaluate(rl.gradient(mod), *args)
    for (pname, p), g in zip(module.named_parameters(), grads):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=pname)


def test_parameters_lead_main_in_named_parameters_order():
    module = MLP()
    mod = rl.from_torch(module, (torch.ones(2, 4),))
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["fc1_weight", "fc1_bias", "fc2_weight",
                                                  "fc2_bias", "x"]
    assert main.params[0].checked_type == rl.TensorType((8, 4), "float32")
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)
    # rl.grad with argnums over the parameters trains them
    loss = rl.parse(rl.astext(mod).replace("-> Tensor[(2, 3), float32]", "")
                    .replace("  %log_softmax\n}", "  sum(%log_softmax)\n}"))
    g = rl.evaluate(rl.grad(loss, argnums=(0, 1, 2, 3)), *[p.detach().numpy() for p in
                                                           module.parameters()],
                    np.ones((2, 4), "float32"))
    assert [x.shape for x in g] == [(8, 4), (8,), (3, 8), (3,)]


def test_parameters_follow_named_parameters_not_their_use_and_tied_ones_come_once():
    main = rl.from_torch(Reordered(), (torch.ones(2, 3),))["main"]
    assert [p.name_hint for p in main.params] == ["scale", "out_weight", "out_bias",
                                                  "inp_weight", "inp_bias", "x"]
    main = rl.from_torch(Tied(), (torch.ones(2, 4),))["main"]
    assert [p.name_hint for p in main.params] == ["a_weight", "x"]


def test_training_mode_batch_norm_and_unknown_operators_are_compile_errors():
    with pytest.raises(rl.CompileError, match=r"eval\(\)"):
        rl.from_torch(_cnn().train(), (torch.ones(1, 1, 8, 8, dtype=torch.float64),))

    class Sorts(nn.Module):
        def forward(self, x):
            return torch.sort(x).values

    with pytest.raises(rl.CompileError, match="sort.*test_torch.py"):
        rl.from_torch(Sorts(), (torch.ones(3),))
