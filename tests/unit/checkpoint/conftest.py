import pytest
import torch

from torchgarden.checkpoint import Checkpoint

torch.set_num_threads(1)


def make_model(out_features: int = 3) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, out_features)
    )


@pytest.fixture
def model_factory():
    """Builds the tiny MLP used across checkpoint tests: ``model_factory(out_features=3)``."""
    return make_model


@pytest.fixture
def trained():
    """A model + Adam optimizer after one step (so the optimizer has state) + a dict item."""
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    extras = {"epoch": 3, "history": [0.5, 0.25]}
    return model, optimizer, extras


@pytest.fixture
def make_checkpoint(trained):
    model, optimizer, extras = trained

    def build():
        return Checkpoint(model=model, optimizer=optimizer, extras=extras)

    return build
