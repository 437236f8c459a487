"""Write samples/manual_qa.jsonl: denki's own manual-style paragraphs (warranty, repairs, support lines, opening
hours, returns, set-up steps) with questions of the kind a help desk gets, a quarter of them unanswerable from the
paragraph. Written for this kit (no outside source); every answer is located by its text, which must occur once.

    python scripts/make_manual_qa.py            # → samples/manual_qa.jsonl and samples/manual.md

samples/manual.md is the same six paragraphs as one Markdown manual (a heading each): the collection that the
quickstart indexes and asks (`denki index build --docs samples/manual.md`) and the demo's 「マニュアルに質問」 tab.
"""
from __future__ import annotations

import json
from pathlib import Path

# (title, paragraph, [(question, answer or None for unanswerable), ...])
MANUALS = [
    ("電気ケトル KT-200 取扱説明書",
     "本製品の保証期間はお買い上げ日から1年間です。保証期間内に取扱説明書に従った正常な使用状態で故障した場合は、"
     "無料で修理いたします。修理をご依頼の際は、保証書と本体をお買い上げの販売店までお持ちください。"
     "製品に関するお問い合わせはお客様サポートセンター（電話 0120-123-456）で承ります。"
     "受付時間は平日の午前9時から午後6時までです。",
     [("保証期間はどのくらいですか?", "お買い上げ日から1年間"),
      ("サポートセンターの電話番号は何番ですか?", "0120-123-456"),
      ("サポートセンターの受付時間は?", "平日の午前9時から午後6時まで"),
      ("修理を頼むときは何を持っていけばよいですか?", "保証書と本体"),
      ("延長保証の料金はいくらですか?", None)]),
    ("ベーカリー・こむぎ堂のご案内",
     "こむぎ堂の営業時間は午前7時から午後7時までです。定休日は毎週水曜日で、祝日の場合は翌日が休みになります。"
     "店内には10席のイートインスペースがあり、コーヒーは一杯200円です。"
     "駐車場はございませんので、近くのコインパーキングをご利用ください。",
     [("こむぎ堂は何時に開きますか?", "午前7時"),
      ("定休日はいつですか?", "毎週水曜日"),
      ("コーヒーはいくらですか?", "200円"),
      ("イートインスペースは何席ありますか?", "10席"),
      ("クレジットカードは使えますか?", None)]),
    ("ワイヤレスイヤホン WE-5 よくある質問",
     "充電ケースにイヤホンを入れると自動的に充電が始まります。フル充電までの時間は約2時間で、"
     "満充電の状態で最大8時間の連続再生ができます。ペアリングするには、ケースのボタンを3秒間長押ししてください。"
     "ランプが青く点滅したらペアリングモードです。イヤホンを紛失した場合は、片側のみ有償で購入できます。",
     [("フル充電までどのくらいかかりますか?", "約2時間"),
      ("連続再生できる時間は?", "最大8時間"),
      ("ペアリングするにはどうすればよいですか?", "ケースのボタンを3秒間長押し"),
      ("ペアリングモードのときランプはどうなりますか?", "青く点滅"),
      ("防水性能はどの等級ですか?", None)]),
    ("オンラインストア 返品・交換について",
     "商品到着後8日以内であれば、未使用品に限り返品を受け付けます。返品をご希望の場合は、"
     "マイページの注文履歴から返品申請を行ってください。お客様のご都合による返品の送料はお客様のご負担となります。"
     "初期不良の場合は、送料当社負担で新品と交換いたします。返金は商品の受け取りを確認してから5営業日以内に行います。",
     [("返品できるのは商品到着後何日以内ですか?", "8日以内"),
      ("返品の申請はどこからしますか?", "マイページの注文履歴"),
      ("初期不良のときはどうなりますか?", "送料当社負担で新品と交換"),
      ("返金はいつ行われますか?", "商品の受け取りを確認してから5営業日以内"),
      ("ギフト包装は有料ですか?", None)]),
    ("会員アプリの初期設定",
     "アプリを起動したら、まずメールアドレスとパスワードを登録してください。パスワードは8文字以上で、"
     "英字と数字の両方を含める必要があります。登録したメールアドレスに確認コードが届くので、"
     "30分以内にアプリに入力してください。確認コードが届かない場合は、迷惑メールフォルダを確認してください。",
     [("パスワードは何文字以上必要ですか?", "8文字以上"),
      ("確認コードはいつまでに入力しますか?", "30分以内"),
      ("確認コードが届かないときはどうすればよいですか?", "迷惑メールフォルダを確認"),
      ("アプリの対応OSは何ですか?", None)]),
    ("ホテル・みなと館 ご宿泊のご案内",
     "チェックインは午後3時から、チェックアウトは午前10時までです。朝食は1階のレストランで"
     "午前6時30分から午前9時30分までご用意しております。大浴場は最上階にあり、午後11時までご利用いただけます。"
     "お荷物はチェックイン前とチェックアウト後もフロントでお預かりします。",
     [("チェックアウトは何時までですか?", "午前10時"),
      ("朝食はどこで食べられますか?", "1階のレストラン"),
      ("大浴場は何時まで使えますか?", "午後11時"),
      ("荷物を預けたいときはどこに頼みますか?", "フロント"),
      ("ペットは連れて行けますか?", None)]),
]


def rows() -> list[dict]:
    out = []
    for m, (title, ctx, qas) in enumerate(MANUALS):
        for k, (q, a) in enumerate(qas):
            row = {"id": f"manual-{m:02d}-{k:02d}", "title": title, "context": ctx, "question": q}
            if a is None:
                row.update(answers={"text": [], "answer_start": []}, is_impossible=True)
            else:
                assert ctx.count(a) == 1, (title, a)
                row.update(answers={"text": [a], "answer_start": [ctx.index(a)]}, is_impossible=False)
            out.append(row)
    return out


def manual_markdown() -> str:
    """The six paragraphs as one Markdown file: a title, then a `##` heading per paragraph."""
    parts = ["# denki サンプルマニュアル\n\n"
             "denki のクイックスタートとデモが索引にする、製品とお店の案内をまとめた架空のマニュアルです。\n"]
    parts += [f"\n## {title}\n\n{paragraph}\n" for title, paragraph, _ in MANUALS]
    return "".join(parts)


if __name__ == "__main__":
    samples = Path(__file__).resolve().parent.parent / "samples"
    path = samples / "manual_qa.jsonl"
    rs = rows()
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rs), encoding="utf-8")
    print(f"{len(rs)} questions ({sum(r['is_impossible'] for r in rs)} unanswerable) → {path}")
    (samples / "manual.md").write_text(manual_markdown(), encoding="utf-8")
    print(f"{len(MANUALS)} sections → {samples / 'manual.md'}")
