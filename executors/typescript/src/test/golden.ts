// The values the Go code sealed (schemas/seal/testdata/sealed.json, which
// schemas/seal's TestGoldenSealedValues checks Go still makes): the fixture
// of the seal and queue key tests.
import { readFileSync } from "node:fs";

export interface Golden {
  workspace: string;
  queue: string;
  epoch: number;
  queue_key: string;
  goal_key: string;
  goal_scope: string;
  values: { scope: string; plaintext: string; sealed: string }[];
  plain_item: string;
  item: string;
  goal_item: string;
}

export const golden = JSON.parse(
  readFileSync(new URL("../../../../schemas/seal/testdata/sealed.json", import.meta.url), "utf8"),
) as Golden;
